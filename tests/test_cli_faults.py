"""Faults a command meets from its surroundings, as real processes: a reader that stops reading (`| head`),
environment variables that point at broken things, locales and terminals. One line (or silence), never a
traceback."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _env(tmp_path, **extra):
    """The environment of a command run from ``tmp_path``: this checkout's depthaudit, a private cache."""
    given = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if os.path.isabs(p)]  # (cwd changes)
    path = os.pathsep.join([str(ROOT / "src"), *given])
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
    ["report", "COPY"],  # (a copy of docs/results/audit_mnist1d: report rewrites its figures, never the repo's)
    ["audit", "--help-all"],
    ["--help"],
], ids=["list-cells", "report", "help-all", "help"])
def test_a_reader_that_stops_reading_ends_the_command_quietly(tmp_path, args):
    """`depthaudit … | head -1`: exit 141 (128 + SIGPIPE, as `yes | head -1`) or 0, no traceback, no message."""
    if "COPY" in args:
        shutil.copytree(ROOT / "docs" / "results" / "audit_mnist1d", tmp_path / "copy")
        args = [str(tmp_path / "copy") if a == "COPY" else a for a in args]
    rc, err = _closed_reader(args, tmp_path)
    print(rc, err)
    assert rc in (0, 141) and err == ""
    if args[0] in ("ladder", "report"):  # depthaudit's own output (argparse's help swallows the error itself)
        assert rc == 141
    assert not (tmp_path / "lc").exists()


def _run(args, tmp_path, shell=False, **env):
    cmd = args if shell else [sys.executable, "-m", "depthaudit", *args]
    p = subprocess.run(cmd, cwd=tmp_path, env=_env(tmp_path, **env), capture_output=True, text=True,
                       errors="replace", timeout=300, shell=shell)
    return p.returncode, p.stderr, p.stdout


def _one_error(err):
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert "Traceback" not in err and len(lines) == 1 and lines[0].startswith("depthaudit: error:"), err
    return lines[0]


TINY_AUDIT = ["audit", "--dataset", "mnist1d", "--methods", "bp", "fa", "--seeds", "1", "--epochs", "1", "--d-hidden",
              "8", "--num-blocks", "1", "--probe-batches", "1", "--probe-batch-size", "16", "--out", "o"]


@pytest.mark.parametrize("plugins, words", [
    ("plugin_raises", "DEPTHAUDIT_PLUGINS=plugin_raises: importing it raised RuntimeError: boom at"),
    ("nosuch_module_q", "DEPTHAUDIT_PLUGINS=nosuch_module_q: no such module"),
    ("nosuch_module_q,plugin_raises", "(its nosuch_module_q): no such module"),  # several: the one named
    ("./plugin_raises.py", "give a module name, not a path")])
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_broken_plugin_named_in_the_environment_is_one_line_before_any_work(tmp_path, plugins, words, jobs):
    """DEPTHAUDIT_PLUGINS (how workers inherit plug-ins; a user may set it): imported by the command itself, so
    --jobs 1 does not ignore it and --jobs 2 does not end in 'a worker process died again' with tracebacks."""
    (tmp_path / "plugin_raises.py").write_text("raise RuntimeError('boom')\n")
    rc, err, _ = _run([*TINY_AUDIT, "--jobs", jobs], tmp_path, DEPTHAUDIT_PLUGINS=plugins)
    assert rc == 2 and words in _one_error(err) and f"DEPTHAUDIT_PLUGINS={plugins}" in err
    assert not (tmp_path / "o").exists()


def test_report_in_a_c_locale_without_utf8_mode(tmp_path):
    """LC_ALL=C with Python's UTF-8 mode off: the files are read as UTF-8, the card printed in ASCII."""
    import shutil

    shutil.copytree(ROOT / "docs" / "results" / "audit_mnist1d", tmp_path / "a")
    rc, err, out = _run(["report", "a"], tmp_path, LC_ALL="C", LANG="C", PYTHONUTF8="0", PYTHONIOENCODING="")
    assert rc == 0 and "Traceback" not in err, err
    assert "verdict" in out.lower() or "PASS" in out or "FLAG" in out, out


def test_closed_stdout_and_a_removed_current_folder(tmp_path):
    """`depthaudit … >&-` runs (its results are files); a shell whose folder was removed gets one line."""
    import shutil

    shutil.copytree(ROOT / "docs" / "results" / "audit_mnist1d", tmp_path / "a")
    py = f"{sys.executable} -m depthaudit"
    rc, err, _ = _run(f"{py} report a >&-", tmp_path, shell=True)
    assert rc == 0 and "Traceback" not in err, err
    assert "verdict" in err.lower() or "PASS" in err, err  # a closed stdout's lines are not lost: they go to stderr
    rc, err, _ = _run(f"mkdir gone && cd gone && rmdir ../gone && {py} train --epochs 0", tmp_path, shell=True)
    assert rc == 2 and "the current folder no longer exists" in _one_error(err)
