"""Runs trained on a GPU (the H200 intervention in docs/results/intervene_e30) list and report on a CPU machine.

Nothing trains: ``--list-cells``/``--stored-only`` accept ``--device cuda`` where there is none, the data is
read on the CPU (its sha256 names the runs), and ``depthaudit report`` re-renders the stored table exactly.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STORED = ROOT / "docs" / "results" / "intervene_e30"
ZIP = ROOT.parent / "shared" / "data" / "cifar10" / "cifar10-jpeg.zip"


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "depthaudit", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=600)


def test_report_rerenders_the_gpu_intervention_identically(tmp_path):
    folder = tmp_path / "iv"
    shutil.copytree(STORED, folder)
    (folder / "intervention.md").unlink()
    r = _cli("report", str(folder))
    assert r.returncode == 0, r.stderr
    assert (folder / "intervention.md").read_text() == (STORED / "intervention.md").read_text()
    assert "| dfa | 0 | 83.0 FLAG |" in r.stdout  # DFA's unpenalised stream explodes (D1), read from the records


@pytest.mark.skipif(not ZIP.exists(), reason="the CIFAR-10 copy of ../shared/data is not beside this checkout")
def test_gpu_runs_are_found_by_name_on_a_cpu_machine(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this checks a machine without CUDA")
    folder = tmp_path / "iv"
    shutil.copytree(STORED, folder)
    common = ["intervene", "--dataset", "cifar10", "--data-dir", str(ZIP), "--methods", "bp", "dfa", "fa-stream",
              "--seeds", "42", "--epochs", "30", "--out", str(folder)]
    r = _cli(*common, "--device", "cuda", "--list-cells")
    assert r.returncode == 0, r.stderr
    status = [line.split("\t")[2] for line in r.stdout.splitlines()]
    print(f"{len(status)} cells: {sorted(set(status))}")
    assert len(status) == 24 and set(status) == {"done"}
    r = _cli(*common, "--device", "cuda")  # training is still refused where CUDA is absent
    assert r.returncode == 2 and "CUDA is not available" in r.stderr
