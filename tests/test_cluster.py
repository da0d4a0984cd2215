"""Sweeps beyond one process: Ray and submitit executors, cells, a killed worker, concurrent sweeps, live logs."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _util import without_wallclock

from depthaudit.cli import main

LADDER = ["ladder", "--dataset", "mnist1d", "--d-hidden", "16", "--num-blocks", "2", "--methods", "fa", "dfa",
          "--k-values", "0", "2", "--seeds", "1", "--epochs", "1", "--probe-batches", "1", "--probe-batch-size", "64"]
FILE = "ladder_d16_L2_mnist1d.json"


def _runs(out: Path) -> dict:
    return json.loads((out / FILE).read_text())["runs"]


_strip = without_wallclock


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("local")
    assert main([*LADDER, "--out", str(out)]) == 0
    return _strip(_runs(out))


def test_ray_local_cluster_gives_the_local_results(tmp_path, reference):
    pytest.importorskip("ray")
    t0 = time.perf_counter()
    import torch

    # a Ray task trains with --cpus-per-run threads; the local reference with this process's count (2 here, 1
    # under OMP_NUM_THREADS=1): the same count, or the products' rounding differs and so do the records
    cpus = str(torch.get_num_threads())
    assert main([*LADDER, "--out", str(tmp_path), "--executor", "ray", "--cpus-per-run", cpus]) == 0
    runs = _runs(tmp_path)
    assert {r["provenance"]["executor"]["name"] for r in runs.values()} == {"ray"}
    assert _strip(runs) == reference
    print(f"ray: 4 runs in {time.perf_counter() - t0:.1f} s (cluster start included)")


def test_submitit_local_executor_gives_the_local_results(tmp_path, reference):
    pytest.importorskip("submitit")
    import torch

    cpus = str(torch.get_num_threads())  # the reference's thread count (as the Ray test): the same rounding
    assert main([*LADDER, "--out", str(tmp_path), "--executor", "slurm", "--slurm-cluster", "local",
                 "--cpus-per-run", cpus]) == 0
    runs = _runs(tmp_path)
    assert {r["provenance"]["executor"]["name"] for r in runs.values()} == {"slurm"}
    assert _strip(runs) == reference


def test_cells_one_by_one_then_report_give_the_local_results(tmp_path, reference, capsys):
    assert main([*LADDER, "--out", str(tmp_path), "--list-cells"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [ln.split("\t")[:3] for ln in lines] == [[str(i), k, "pending"] for i, k in enumerate(
        ["fa/k0/s1", "fa/k2/s1", "dfa/k0/s1", "dfa/k2/s1"])]
    assert main([*LADDER, "--out", str(tmp_path), "--cell", "0"]) == 0
    assert main([*LADDER, "--out", str(tmp_path), "--cell", "dfa/k2/s1"]) == 0
    assert main(["report", str(tmp_path)]) == 2  # two cells missing: refused, naming them
    err = capsys.readouterr().err
    assert "2 of 4 cells are not finished (fa/k2/s1, dfa/k0/s1)" in err
    assert f"remove {tmp_path / 'sweep.json'})" in err  # the way out when the folder holds other runs
    os.environ["SLURM_ARRAY_TASK_ID"] = "1"
    try:
        assert main([*LADDER, "--out", str(tmp_path), "--cell", os.environ["SLURM_ARRAY_TASK_ID"]]) == 0
    finally:
        del os.environ["SLURM_ARRAY_TASK_ID"]
    assert main([*LADDER, "--out", str(tmp_path), "--cell", "2"]) == 0
    assert main([*LADDER, "--out", str(tmp_path), "--cell", "2"]) == 0
    assert "already finished" in capsys.readouterr().out
    assert main(["report", str(tmp_path)]) == 0
    assert _strip(_runs(tmp_path)) == reference
    assert (tmp_path / FILE.replace(".json", ".md")).exists()


def _env(tmp_path):
    return {**os.environ, "DEPTHAUDIT_CACHE_DIR": str(tmp_path / "cache")}


def _children(pid: int) -> list[int]:
    """Spawned worker processes of ``pid`` (not the resource tracker)."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            stat = (p / "stat").read_text()
            cmd = (p / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid and "spawn_main" in cmd:
            out.append(int(p.name))
    return out


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc to find the worker processes")
def test_a_worker_killed_mid_sweep_loses_only_work_in_flight(tmp_path):
    base = [sys.executable, "-m", "depthaudit.cli", *LADDER, "--jobs", "2"]  # workers of 1 thread each
    subprocess.run([*base, "--out", str(tmp_path / "ref")], env=_env(tmp_path), check=True, capture_output=True,
                   timeout=600)
    reference = _strip(_runs(tmp_path / "ref"))
    tmp_path = tmp_path / "killed"
    cli = [*base, "--out", str(tmp_path)]
    proc = subprocess.Popen(cli, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed, deadline = None, time.time() + 300
    while killed is None and time.time() < deadline and proc.poll() is None:
        workers = _children(proc.pid)
        if (tmp_path / FILE).exists() and workers:  # one run is stored, the sweep goes on
            killed = workers[0]
            os.kill(killed, signal.SIGKILL)
        time.sleep(0.02)
    out, err = proc.communicate(timeout=600)
    assert killed is not None, err
    assert proc.returncode == 0, err
    assert "a worker process died (killed by SIGKILL: out of memory, or a kill?)" in err
    assert _strip(_runs(tmp_path)) == reference
    p = subprocess.run(cli, env=_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert "4 of 4 runs already finished" in p.stderr and "runs  elapsed" not in p.stderr


def test_two_sweeps_into_one_store_at_once(tmp_path, reference):
    cli = [sys.executable, "-m", "depthaudit.cli", *LADDER, "--out", str(tmp_path)]
    procs = [subprocess.Popen(cli, env=_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    for p in procs:
        assert p.wait(timeout=600) == 0, p.stderr.read()
    runs = _runs(tmp_path)  # valid JSON, every run exactly once
    assert sorted(runs) == sorted(reference)
    assert _strip(runs) == reference
    records = [p for p in (tmp_path / FILE.replace(".json", ".runs")).glob("*.json") if p.name != "identity.json"]
    assert len(records) == 4


def test_tensorboard_log_has_every_epoch_and_the_audit_scalars(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert main([*LADDER[:-11], "--k-values", "2", "--seeds", "1", "--epochs", "2", "--probe-batches", "1",
                 "--probe-batch-size", "64", "--out", str(tmp_path), "--log", "tensorboard"]) == 0
    runs = _runs(tmp_path)
    logdir = tmp_path / "logs" / "tensorboard" / "fa_k2_s1"
    acc = EventAccumulator(str(logdir)).Reload()
    tags = acc.Tags()["scalars"]
    assert {"train/loss", "test/acc", "audit/rho", "audit/g_L", "cosine/l0", "cosine/l2"} <= set(tags)
    got = [(e.step, e.value) for e in acc.Scalars("test/acc")]
    want = [(h["epoch"], h["test_acc"]) for h in runs["fa/k2/s1"]["history"]]
    assert [s for s, _ in got] == [s for s, _ in want]
    assert max(abs(a - b) for (_, a), (_, b) in zip(got, want, strict=True)) < 1e-6


def test_wandb_offline_run_per_training(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    assert main([*LADDER[:-11], "--k-values", "0", "2", "--seeds", "1", "--epochs", "1", "--probe-batches", "1",
                 "--probe-batch-size", "64", "--out", str(tmp_path), "--log", "wandb"]) == 0
    offline = sorted((tmp_path / "logs" / "wandb").glob("offline-run-*"))
    assert len(offline) == 4  # fa and dfa × k ∈ {0, 2}
    assert all(list(d.glob("*.wandb")) for d in offline)


def test_missing_extra_is_one_line(tmp_path, capsys, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_ray(name, *a, **k):
        if name == "ray" or name.startswith("ray."):
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_ray)  # installed but broken: found, then refused at import
    assert main([*LADDER, "--out", str(tmp_path), "--executor", "ray"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == 'depthaudit: error: --executor ray needs Ray: pip install "depthaudit[ray]"'


@pytest.mark.parametrize("executor,module,extra", [("ray", "ray", "ray"), ("slurm", "submitit", "slurm")])
def test_a_missing_extra_is_refused_before_the_store_is_claimed(executor, module, extra, tmp_path, capsys,
                                                                 monkeypatch):
    """Walk 17 cases 126, 127: without Ray the ladder claimed its store first, which then blocked other configs."""
    from depthaudit import executors

    real = executors.installed
    monkeypatch.setattr(executors, "installed", lambda m: False if m == module else real(m))
    monkeypatch.setattr(executors.shutil, "which", lambda name, *a, **k: f"/usr/bin/{name}")  # SLURM is here
    out = tmp_path / "o"
    audit = ["audit", *LADDER[1:7], "--methods", "bp", "--epochs", "1", "--out", str(out)]
    for cmd in ([*LADDER, "--out", str(out)], audit):
        assert main([*cmd, "--executor", executor]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        print(err)
        assert err == [f'depthaudit: error: --executor {executor} needs {"Ray" if module == "ray" else module}: '
                       f'pip install "depthaudit[{extra}]"']
        assert not out.exists()
