"""Every command the README documents still parses: documented commands cannot rot.

Each fenced ``depthaudit …`` line (continuations joined, comments dropped, placeholders such as ``DIR``
filled in) is parsed by the real CLI parser — unknown flags, bad values and removed commands fail here —
without training. Each ``python benchmarks/….py …`` line's flags must appear in that script's ``--help``.
The cheap ones also run: the default audit's parse, and ``depthaudit --help``.
"""

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from depthaudit.commands import build_parser
from depthaudit.plugins import import_plugins_in

ROOT = Path(__file__).resolve().parents[1]
PLACEHOLDERS = {"DIR": "data", "DEV": "cpu", "PT": "checkpoint.pt", "FILE": "text.txt", "$SLURM_ARRAY_TASK_ID": "0"}


def _commands(prefix: str) -> list[str]:
    """The README's fenced command lines starting with ``prefix`` (``$ `` prompts stripped)."""
    out, inside, pending = [], False, ""
    for raw in (ROOT / "README.md").read_text().splitlines():
        if raw.lstrip().startswith("```"):
            inside, pending = not inside, ""
            continue
        if not inside:
            continue
        ln = pending + raw.strip()
        if ln.endswith("\\"):  # a continued command
            pending = ln[:-1] + " "
            continue
        pending = ""
        ln = ln[2:] if ln.startswith("$ ") else ln
        if ln.startswith(prefix) and "..." not in ln and "[" not in ln:  # [optional] synopses are not commands
            out.append(ln)
    return out


def _argv(line: str) -> list[str]:
    line = line.split("  #", 1)[0]
    toks = shlex.split(line, comments=True)
    return [PLACEHOLDERS.get(t, t) for t in toks]


DEPTHAUDIT = _commands("depthaudit ")
BENCH = _commands("python benchmarks/")


def test_the_readme_documents_commands():
    assert len(DEPTHAUDIT) >= 12 and len(BENCH) >= 3


@pytest.mark.parametrize("line", DEPTHAUDIT)
def test_documented_depthaudit_command_parses(line):
    argv = _argv(line)[1:]
    import_plugins_in(argv)
    try:
        args = build_parser(argv).parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"README command does not parse (exit {exc.code}): {line}")
    assert callable(args.func)


@pytest.mark.parametrize("line", BENCH)
def test_documented_benchmark_flags_exist(line):
    argv = _argv(line)
    script = ROOT / argv[1]
    assert script.exists(), line
    p = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=300,
                       cwd=ROOT)
    assert p.returncode == 0, p.stderr[-1000:]
    for tok in argv[2:]:
        if tok.startswith("--"):
            assert tok.split("=")[0] in p.stdout, f"{tok} is not a flag of {argv[1]}"
