"""benchmarks/study_on_gpu.py on the CPU: the dry run's cells and estimate, and the deadline keeping what finished."""

import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "study_on_gpu.py"


def _module():
    spec = importlib.util.spec_from_file_location("study_on_gpu", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(*args, timeout=600):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(SCRIPT), "--dataset", "mnist1d", "--seeds", "42", *args],
                          capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)


def test_estimate_is_the_measured_step_times_by_hand():
    """A part's seconds: pending runs only; stackable runs in groups of ≤ 16 (never cheaper than the measured 15);
    a method that cannot stack, one run at a time."""
    m = _module()
    f = m.FIGURES
    cells = ([(f"bp/k{k}/s{s}", "pending", "bp") for k in range(5) for s in range(4)]  # 20 bp: groups 16 + 4
             + [("x", "done", "bp")] + [(f"sb/{i}", "pending", "sb") for i in range(3)]
             + [("ep/0", "pending", "ep")])
    steps = 30 * math.ceil(50_000 / 128)
    want = (steps * f["graphed_ms"] * (16 / 15 + 1) / 1e3  # bp: graphed, groups of 16 and 4 (counted as 15)
            + 3 * steps * f["one_ms"] * m.OPS_VS_BP.get("sb", 1.5) / 1e3  # sb: not stackable
            + steps * f["stacked_ms"] * m.OPS_VS_BP.get("ep", 1.5) / 1e3)  # ep: stacked, not graphable
    got = m.part_seconds(cells, 30, "cifar10")
    print(f"part estimate {got:.3f} s, by hand {want:.3f} s")
    assert abs(got - want) < 1e-9 * want


def test_dry_run_lists_every_cell_and_a_deadline_keeps_what_finished(tmp_path):
    out = tmp_path / "study"
    parts = ["--only", "ladder-bp", "table1-bp", "--out", str(out), "--epochs-ladder", "1", "--device", "cpu"]
    dry = _run(*parts, "--epochs-table1", "1", "--dry-run")
    print(dry.stdout[-1500:], dry.stderr[-1500:])
    assert dry.returncode == 0
    assert "ladder-bp: 5 cells (0 done), 1 epochs" in dry.stdout
    assert "table1-bp-dfa: 4 cells (0 done), 1 epochs" in dry.stdout
    for cell in [*(f"bp/k{k}/s42" for k in range(5)), "bp/trained/s42", "bp/frozen/s42", "dfa/frozen/s42"]:
        assert f"    {cell}\tpending" in dry.stdout, cell
    assert "plan: 2 processes, 9 cells (0 done); estimated" in dry.stdout
    # the table's runs get a budget they cannot finish before the deadline; the ladder's one epoch can
    res = _run(*parts, "--epochs-table1", "400", "--deadline", "75", "--status-every", "10", "--grace", "60")
    print(res.stdout[-3000:], res.stderr[-1500:])
    assert res.returncode == 0
    assert "deadline: interrupting table1-bp-dfa" in res.stdout and "interrupting ladder-bp" not in res.stdout
    assert "ladder-bp: 5/5 cells done" in res.stdout and "table1-bp-dfa: 0/4 cells done" in res.stdout
    assert (out / "logs" / "ladder-bp.log").exists()
    again = _run(*parts, "--epochs-table1", "400", "--dry-run")  # what finished is in the store: resumable
    assert "ladder-bp: 5 cells (5 done)" in again.stdout and "table1-bp-dfa: 4 cells (0 done)" in again.stdout
