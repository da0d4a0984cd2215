"""The top-level help lists every command without importing torch; each command's help still works."""

import subprocess
import sys

from depthaudit.commands import COMMANDS


def test_top_level_help_is_fast_and_imports_no_torch():
    code = ("import sys; from depthaudit.cli import main; rc = main(['--help']); "
            "print('torch' in sys.modules, rc)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    for name in COMMANDS:
        assert f"    {name} " in p.stdout, name
    assert p.stdout.strip().splitlines()[-1] == "False 0"


def test_every_command_builds_its_own_parser():
    from depthaudit.cli import main

    for name in COMMANDS:
        assert main([name, "--help"]) == 0, name


def test_help_shows_what_each_command_uses(capsys):
    from depthaudit.cli import main

    main(["report", "--help"])
    assert "usage: depthaudit report [options] DIR" in capsys.readouterr().out
    main(["identity", "--help"])
    out = capsys.readouterr().out
    assert "--d-hidden" in out and "--lr" not in out and "--epochs" not in out  # nothing trains
    main(["probes", "--help"])
    out = capsys.readouterr().out
    assert "--method " in out and "--methods" not in out
    assert main(["identity", "--lr", "0.1", "--help"]) == 0  # hidden, still accepted (shared configs)
