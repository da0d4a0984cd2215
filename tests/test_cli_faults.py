"""Faults a command meets from its surroundings, as real processes: a reader that stops reading (`| head`),
environment variables that point at broken things, locales and terminals. One line (or silence), never a
traceback."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _env(tmp_path, **extra):
    """The environment of a command run from ``tmp_path``: this checkout's depthaudit, a private cache."""
    path = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "DEPTHAUDIT_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1",
            **extra}


def _closed_reader(args, tmp_path, **env):
    """Run ``depthaudit args`` with stdout a pipe whose reader is already gone (`depthaudit … | head -0`)."""
    p = subprocess.Popen([sys.executable, "-m", "depthaudit", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         cwd=tmp_path, env=_env(tmp_path, **env))
    p.stdout.close()  # long before the child (which imports torch) writes anything
    err = p.stderr.read().decode()
    return p.wait(timeout=300), err


@pytest.mark.parametrize("args", [
    ["ladder", "--dataset", "mnist1d", "--list-cells", "--seeds", *map(str, range(1, 200)), "--out", "lc"],
    ["report", str(ROOT / "docs" / "results" / "audit_mnist1d")],
    ["audit", "--help-all"],
    ["--help"],
], ids=["list-cells", "report", "help-all", "help"])
def test_a_reader_that_stops_reading_ends_the_command_quietly(tmp_path, args):
    """`depthaudit … | head -1`: exit 141 (128 + SIGPIPE, as `yes | head -1`) or 0, no traceback, no message."""
    rc, err = _closed_reader(args, tmp_path)
    print(rc, err)
    assert rc in (0, 141) and err == ""
    if args[0] in ("ladder", "report"):  # depthaudit's own output (argparse's help swallows the error itself)
        assert rc == 141
    assert not (tmp_path / "lc").exists()
