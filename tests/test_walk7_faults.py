"""What the seventh independent walk (issue 36) found, each reproduced as the walker did; each fails before its fix."""

import os
import subprocess
import sys

from depthaudit.cli import main

TINY = ["--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1"]


def test_a_size_that_overflows_64_bits_is_one_line(tmp_path, capsys):
    """10, 11: `--pfa-ratio 9223372036854775807` (in range, but d·ratio overflows) was an internal-error traceback."""
    for cmd in (["train", *TINY, "--method", "pfa", "--pfa-ratio", "9223372036854775807", "--out", str(tmp_path / "t")],
                ["audit", *TINY, "--methods", "bp", "pfa:ratio=9223372036854775807", "--out", str(tmp_path / "a")]):
        assert main(cmd) == 2, cmd[0]
        err = capsys.readouterr().err
        assert "does not fit in 64 bits" in err and "Traceback" not in err and "internal error" not in err, err
    assert not (tmp_path / "t").exists() and not (tmp_path / "a").exists()


def test_the_report_scripts_run_with_stdout_closed(tmp_path):
    """21, 22: `python -m depthaudit.report.field/.claim … >&-` was an AttributeError traceback (stdout None)."""
    a = tmp_path / "a"
    assert main(["audit", *TINY, "--methods", "bp", "--probe-batches", "1", "--out", str(a)]) == 0
    for mod, first, extra in (("depthaudit.report.field", "f.md", ["--dataset", "mnist1d", "--epochs", "1"]),
                              ("depthaudit.report.claim", "c.png", [])):
        p = subprocess.run([sys.executable, "-m", mod, str(tmp_path / first), str(a), *extra],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=300,
                           env={**os.environ, "OMP_NUM_THREADS": "1"}, preexec_fn=lambda: os.close(1))
        assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
        assert (tmp_path / first).is_file()


def test_intervene_keeps_the_checkpoints_its_cka_reads(tmp_path, capsys):
    """101, 102: a fresh intervene said each trained run's checkpoint.pt was missing (it never wrote them), and the
    advice (move the run away, rerun) retrained it without one again."""
    out = tmp_path / "i"
    assert main(["intervene", *TINY, "--methods", "bp", "fa", "--lambdas", "0", "0.1", "--probe-batches", "1",
                 "--out", str(out)]) == 0
    assert "is missing" not in capsys.readouterr().err
    assert len(list(out.glob("runs/*_all_*/checkpoint.pt"))) == 4  # bp and fa at each λ


def test_an_interrupted_forced_training_leaves_the_folders_claim_as_it_was(tmp_path):
    """115, 116: `train --force` into a finished run's folder, interrupted, kept the old result but left
    identity.json claiming the interrupted run's config. Real process, real SIGINT."""
    import signal
    import time

    t = tmp_path / "t"
    assert main(["train", *TINY, "--out", str(t)]) == 0
    claim, result = (t / "identity.json").read_bytes(), (t / "result.json").read_bytes()
    p = subprocess.Popen([sys.executable, "-m", "depthaudit", "train", "--dataset", "mnist1d", "--d-hidden", "32",
                          "--num-blocks", "2", "--epochs", "2000", "--method", "fa", "--force", "--out", str(t)],
                         stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # (as a terminal delivers it)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not p.stderr.readline().startswith("epoch 1/"):
        pass
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert (t / "identity.json").read_bytes() == claim and (t / "result.json").read_bytes() == result


def test_download_into_a_new_data_dir_makes_it_and_names_the_real_problem(tmp_path, monkeypatch, capsys):
    """143: `--download --data-dir NEW` said the folder does not exist and to use --download (given already)."""
    import depthaudit.data.cifar as cifar
    from depthaudit.errors import UsageError

    asked = []

    def offline(url, md5, path):
        asked.append(path)
        raise UsageError(f"download of {url} failed (offline); check the connection or use --data-dir")

    monkeypatch.setattr(cifar, "download", offline)
    new = tmp_path / "new dl"
    assert main(["train", "--dataset", "cifar10", "--download", "--data-dir", str(new), "--epochs", "1",
                 "--out", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err
    assert "download of" in err and "does not exist" not in err, err
    assert asked and asked[0].parent == new  # it was to be downloaded into the folder given
    assert not new.exists()  # (a failed download leaves no empty folder behind)


def test_base_width_outside_resnet_is_said_and_names_no_other_run(tmp_path, capsys):
    """173, 174: `--base-width` with --family resmlp gave no note, was stored in every record, and a rerun with
    another value silently retrained every finished run."""
    args = ["saturation", "--family", "resmlp", "--dataset", "mnist1d", "--d-hidden", "8", "--extra", "0",
            "--epochs", "1", "--analysis-batches", "1", "--out", str(tmp_path / "s")]
    assert main(args) == 0
    capsys.readouterr()
    assert main([*args, "--base-width", "8"]) == 0
    err = capsys.readouterr().err
    assert "--base-width has no effect with --family resmlp" in err and "1 of 1 runs already finished" in err, err
    import depthaudit as da

    assert da.SaturationConfig(family="resmlp", base_width=8).base_width == 16
    assert da.SaturationConfig(family="resnet", base_width=8).base_width == 8


def test_probes_of_two_specs_of_one_method_share_no_store_and_a_refusal_leaves_no_claim(tmp_path, capsys):
    """157–159: probes of `fa` after `fa:head=exact` into one folder shared one credit-mix store (refused), and the
    refused command left its claim, which then refused the next command."""
    out = tmp_path / "p"
    base = ["probes", *TINY, "--alphas", "0.5", "--seeds", "1", "--probe-batches", "1", "--out", str(out)]
    assert main([*base, "--method", "fa"]) == 0
    assert main([*base, "--method", "fa:head=exact"]) == 0  # its own store beside fa's
    assert (out / "credit_mix_fa_head-exact_d8_L1_mnist1d.json").is_file()
    assert (out / "credit_mix_fa_d8_L1_mnist1d.json").is_file()
    # a refusal after the claim: the store of this spec holds another configuration (lr)
    capsys.readouterr()
    (out / "probes_fa_head-exact.identity.json").rename(tmp_path / "moved.identity.json")
    assert main([*base, "--method", "fa:head=exact", "--lr", "0.002"]) == 2
    assert "holds runs of a different configuration" in capsys.readouterr().err
    assert not (out / "probes_fa_head-exact.identity.json").exists()


def test_walk7_unclear_outcomes_made_clear(tmp_path, capsys):
    """16, 53, 91, 92, 95, 177 (unclear): field --epochs beyond 64 bits accepted; da.train(cfg, None) a bare
    TypeError; --warmup equal to the method, or --warmup-fraction 1, said nothing; `--force` → "did you mean
    --cell?"."""
    import pytest

    import depthaudit as da
    from depthaudit.report import field

    assert field.main([str(tmp_path / "f.md"), str(tmp_path), "--epochs", "99999999999999999999"]) == 2
    assert "give the budget, an integer >= 1" in capsys.readouterr().err
    with pytest.raises(da.ConfigError, match="out must be a folder path"):
        da.train(da.TrainConfig(), None)
    assert main(["train", *TINY, "--method", "dfa", "--warmup", "dfa", "--out", str(tmp_path / "a")]) == 0
    assert "--warmup dfa is the method itself" in capsys.readouterr().err
    assert main(["train", *TINY, "--method", "fa", "--warmup", "bp", "--warmup-fraction", "1",
                 "--out", str(tmp_path / "b")]) == 0
    assert "the method itself never trains" in capsys.readouterr().err
    assert main(["audit", *TINY, "--force", "--out", str(tmp_path / "c")]) == 2
    assert "did you mean" not in capsys.readouterr().err
    from depthaudit.experiments.grow import GrowConfig
    from depthaudit.experiments.saturation import SaturationConfig

    for make in (SaturationConfig, GrowConfig):  # (57) an unknown family: the ConfigError every other value gets
        with pytest.raises(da.ConfigError, match="unknown depth family; choose one of: .*resmlp"):
            make(family="nope")


def test_data_of_another_dataset_than_the_config_names_is_refused(tmp_path):
    """179, 181, 182: da.audit/ladder/identity with data= teacher-a0 under a config naming mnist1d trained on it and
    wrote every title, file name and record as mnist1d."""
    import pytest
    import torch

    import depthaudit as da

    data = da.load_data("teacher-a0", None, False, torch.device("cpu"))
    base = da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=1, epochs=1)
    for call in (lambda: da.audit(da.AuditConfig(base=base, methods=("bp",)), tmp_path / "a", data=data),
                 lambda: da.ladder(da.LadderConfig(base=base, methods=("bp",)), tmp_path / "l", data=data),
                 lambda: da.identity(base, seeds=(1,), data=data, out=tmp_path / "i.json")):
        with pytest.raises(da.ConfigError, match="is 'teacher-a0''s data but the config names dataset 'mnist1d'"):
            call()
    assert not any(tmp_path.iterdir())


def test_a_plugin_that_changes_torchs_defaults_at_import_is_undone(tmp_path, monkeypatch, capsys):
    """189, 190: a plug-in setting float64 or turning gradients off at import was an internal-error traceback."""
    import torch

    (tmp_path / "walk7_torchdefaults.py").write_text(
        "import torch\ntorch.set_default_dtype(torch.float64)\ntorch.set_grad_enabled(False)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert main(["--plugin", "walk7_torchdefaults", "train", *TINY, "--out", str(tmp_path / "t")]) == 0
    finally:
        torch.set_default_dtype(torch.float32)
        torch.set_grad_enabled(True)
    err = capsys.readouterr().err
    assert "default dtype to torch.float64 at import; restored to float32" in err and "gradients off" in err
    assert (tmp_path / "t" / "result.json").is_file()
    import pytest

    import depthaudit as da
    from depthaudit.errors import UsageError

    torch.set_default_dtype(torch.float64)  # the user's own code (not a plug-in): named before anything is written
    try:
        with pytest.raises(UsageError, match="torch's default dtype is torch.float64"):
            da.train(da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=1, epochs=1), tmp_path / "u")
    finally:
        torch.set_default_dtype(torch.float32)
    assert not (tmp_path / "u").exists()


def test_a_forced_run_without_checkpoint_leaves_no_other_runs_weights(tmp_path):
    """W14: `train --force --no-checkpoint` over a run left that run's checkpoint.pt beside the new result.json."""
    t = tmp_path / "t"
    assert main(["train", *TINY, "--out", str(t)]) == 0 and (t / "checkpoint.pt").is_file()
    assert main(["train", *TINY, "--lr", "0.002", "--force", "--no-checkpoint", "--out", str(t)]) == 0
    assert not (t / "checkpoint.pt").exists()


def test_a_ray_cluster_that_does_not_start_is_one_line(tmp_path, monkeypatch, capsys):
    """W11: `--executor ray` when the local Ray cluster cannot start (a node timed out) was an internal error."""
    import pytest

    ray = pytest.importorskip("ray")

    def no_cluster(**kw):
        raise Exception("The current node timed out during startup.")  # (Ray raises a bare Exception here)

    monkeypatch.setattr(ray, "init", no_cluster)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    assert main(["audit", *TINY, "--methods", "bp", "--executor", "ray", "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "the Ray cluster (local) did not start (The current node timed out during startup.)" in err, err
    assert "internal error" not in err


PLUGIN_THREAD = """import threading, time
from depthaudit.methods import METHODS
from depthaudit.methods.base import CreditMethod
from depthaudit.methods.bp import bp_credits

_started = []


def _spin():
    while True:
        time.sleep(0.5)


@METHODS.register("walk7thr")
class Thr(CreditMethod):
    name = "walk7thr"
    needs_input_grad = True

    def credits(self, model, tr, e):
        if not _started:  # a non-daemon thread started at run time, inside the worker only
            _started.append(1)
            threading.Thread(target=_spin, daemon=False).start()
        return bp_credits(tr)
"""


def test_a_thread_a_plugin_starts_in_its_workers_neither_hangs_nor_deafens_jobs_2(tmp_path):
    """W13 (233, 234): the workers were never stopped (the pool had forgotten them), so `audit --jobs 2` hung
    after its report, and Ctrl-C was ignored while it closed the pool. Real processes, real signals."""
    import signal
    import time

    (tmp_path / "walk7thr.py").write_text(PLUGIN_THREAD)
    env = {**os.environ, "PYTHONPATH": str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-m", "depthaudit", "--plugin", "walk7thr", "audit", "--dataset", "mnist1d",
            "--d-hidden", "16", "--num-blocks", "2", "--epochs", "1", "--probe-batches", "1", "--methods",
            "walk7thr", "--jobs", "2", "--out"]
    p = subprocess.run([*argv, str(tmp_path / "a")], env=env, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0 and (tmp_path / "a" / "report.json").is_file(), p.stderr
    assert "after their runs were stored (a plug-in's thread still running?)" in p.stderr
    # an interrupt while the pool closes (the workers linger): every worker stopped, exit 130 within seconds
    p = subprocess.Popen([*argv, str(tmp_path / "b")], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True, start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        for line in p.stderr:
            if "2/2 runs" in line:
                break
        time.sleep(1.0)  # inside the 10 s the pool gives its workers to exit
        t0 = time.monotonic()
        os.killpg(p.pid, signal.SIGINT)
        rest = p.stderr.read()
        rc = p.wait(timeout=60)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    print(f"exit {rc} {took:.1f} s after the interrupt")
    assert rc == 130 and took < 8, rest
    assert "all 2 run(s) of this stage are stored" in rest and "Traceback" not in rest, rest
    assert len(list((tmp_path / "b" / "runs").glob("*/result.json"))) == 2
    assert subprocess.run(["pgrep", "-f", str(tmp_path / "b")], capture_output=True).returncode == 1  # none left
