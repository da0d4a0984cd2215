"""A store has one identity and refuses another, atomically: concurrent sweeps never mix or lose a run.

Real processes started into one folder at once, over many trials; plus the one interleaving that broke
before (both sweeps open the store before either claims it), forced in-process.
"""

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from depthaudit.config import TrainConfig
from depthaudit.errors import UsageError
from depthaudit.stores import FileStore, RunSpec, claim_folder, still_owner

LADDER = ["ladder", "--dataset", "mnist1d", "--d-hidden", "16", "--num-blocks", "1", "--methods", "fa",
          "--k-values", "0", "1", "--seeds", "1", "--epochs", "1", "--probe-batches", "1", "--probe-batch-size", "64"]
FILE = "ladder_d16_L1_mnist1d.json"
AUDIT = ["audit", "--dataset", "mnist1d", "--d-hidden", "16", "--num-blocks", "1", "--methods", "bp", "--seeds", "1",
         "--epochs", "1", "--probe-batches", "1", "--probe-batch-size", "64"]


def _cli(args, out, cache):
    env = {**os.environ, "DEPTHAUDIT_CACHE_DIR": str(cache), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "depthaudit", *args, "--out", str(out)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _pair(args_a, args_b, out, cache):
    """Start two commands into ``out`` at once; their (returncode, stderr)."""
    procs = [_cli(args_a, out, cache), _cli(args_b, out, cache)]
    return [(p.wait(timeout=600), p.stderr.read()) for p in procs]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    c = tmp_path_factory.mktemp("cache")
    out = tmp_path_factory.mktemp("warm")
    p = _cli([*LADDER, "--k-values", "0"], out, c)  # decode mnist1d once, so the trials start alike
    assert p.wait(timeout=600) == 0, p.stderr.read()
    return c


def _error_lines(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("depthaudit: error")]


def _trained(err: str) -> list[str]:
    """The runs this process trained itself (progress lines, not those another sweep stored)."""
    return [ln.split("| ", 1)[1].split(":")[0] for ln in err.splitlines()
            if "runs  elapsed" in ln and "stored by another sweep" not in ln]


def test_two_ladders_differing_only_in_lr_never_mix(tmp_path, cache):
    """10 trials: two ladders (--lr 0.001 vs 0.002) into one folder at once; one is refused before it trains."""
    def trial(i):
        out = tmp_path / f"t{i}"
        lrs = ("0.001", "0.002") if i % 2 == 0 else ("0.002", "0.001")
        res = _pair([*LADDER, "--lr", lrs[0]], [*LADDER, "--lr", lrs[1]], out, cache)
        return lrs, res, out

    with ThreadPoolExecutor(3) as pool:
        trials = list(pool.map(trial, range(10)))
    for lrs, res, out in trials:
        codes = sorted(rc for rc, _ in res)
        assert codes == [0, 2], res
        winner = float([lr for lr, (rc, _) in zip(lrs, res, strict=True) if rc == 0][0])
        loser_err = [err for rc, err in res if rc == 2][0]
        assert len(_error_lines(loser_err)) == 1 and "differs in: lr" in loser_err, loser_err
        assert "Traceback" not in loser_err and not _trained(loser_err), loser_err  # refused before training
        doc = json.loads((out / FILE).read_text())
        assert doc["identity"]["lr"] == winner
        assert sorted(doc["runs"]) == ["fa/k0/s1", "fa/k1/s1"]
        assert {r["config"]["lr"] for r in doc["runs"].values()} == {winner}  # nothing of the other lr
        marker = json.loads((out / FILE.replace(".json", ".runs") / "identity.json").read_text())
        assert marker["identity"]["lr"] == winner


def test_two_identical_ladders_cooperate_each_run_trained_once(tmp_path, cache):
    """3 trials: the same ladder twice at once: both exit 0, every run trained exactly once, nothing lost."""
    def trial(i):
        out = tmp_path / f"t{i}"
        return _pair(LADDER, LADDER, out, cache), out

    with ThreadPoolExecutor(2) as pool:
        trials = list(pool.map(trial, range(3)))
    for res, out in trials:
        assert [rc for rc, _ in res] == [0, 0], res
        trained = sorted(k for _, err in res for k in _trained(err))
        assert trained == ["fa/k0/s1", "fa/k1/s1"], [err for _, err in res]
        doc = json.loads((out / FILE).read_text())
        assert sorted(doc["runs"]) == ["fa/k0/s1", "fa/k1/s1"]


def test_two_different_audits_into_one_folder(tmp_path, cache):
    """2 trials: audits differing in --lr into one --out at once: one report, of the audit that owns the folder."""
    def trial(i):
        out = tmp_path / f"t{i}"
        return _pair([*AUDIT, "--lr", "0.001"], [*AUDIT, "--lr", "0.002"], out, cache), out

    with ThreadPoolExecutor(2) as pool:
        trials = list(pool.map(trial, range(2)))
    for res, out in trials:
        assert sorted(rc for rc, _ in res) == [0, 2], res
        winner = 0.001 if res[0][0] == 0 else 0.002
        loser_err = [err for rc, err in res if rc == 2][0]
        assert len(_error_lines(loser_err)) == 1 and "base.lr" in loser_err and "--replace-report" in loser_err
        assert "runs  elapsed" not in loser_err
        rep = json.loads((out / "report.json").read_text())
        assert rep["config"]["base"]["lr"] == winner
        assert json.loads((out / "identity.json").read_text())["identity"]["base"]["lr"] == winner


def _spec(lr):
    cfg = TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=1, epochs=1, lr=lr, device="cpu")
    return RunSpec("bp/k0/s1", cfg, None)


def test_both_open_before_either_claims(tmp_path):
    """The interleaving that mixed two ladders: both open the store (no file yet), then claim in turn."""
    path = tmp_path / "ladder_x.json"
    a = FileStore(path, "s.v1", {"lr": 0.001})
    b = FileStore(path, "s.v1", {"lr": 0.002})  # no file yet: opening is not claiming
    a.claim()
    with pytest.raises(UsageError, match=r"differs in: lr\)"):
        b.claim()
    FileStore(path, "s.v1", {"lr": 0.001}).claim()  # the same configuration: welcome
    # the marker in .runs alone (the JSON moved away) still holds the identity
    path.unlink()
    with pytest.raises(UsageError, match="ladder_x.runs is claimed by a sweep of a different configuration that has no "
                       "finished run yet"):
        FileStore(path, "s.v1", {"lr": 0.002})


def test_folder_claim_and_take_over(tmp_path):
    c1 = claim_folder(tmp_path, "audit", {"base": {"lr": 0.001}})
    with pytest.raises(UsageError, match=r"differs in base\.lr"):
        claim_folder(tmp_path, "audit", {"base": {"lr": 0.002}})
    c2 = claim_folder(tmp_path, "audit", {"base": {"lr": 0.002}}, take_over=True)
    with pytest.raises(UsageError, match="taken over"), still_owner(tmp_path, c1):
        pass
    with still_owner(tmp_path, c2):
        pass


def test_per_run_lock_is_exclusive_across_processes(tmp_path):
    """While one process holds a run's lock, another cannot take it (and gets it once the holder dies)."""
    store = FileStore(tmp_path / "l.json", "s.v1", {})
    code = ("import sys, time\nfrom depthaudit.stores import file_lock\n"
            f"with file_lock({str(store.runs_dir / 'bp%2Fk0%2Fs1.lock')!r}):\n"
            "    print('held', flush=True)\n    time.sleep(60)\n")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")})
    try:
        assert holder.stdout.readline().strip() == "held"
        with store.run_lock(_spec(0.001), wait=False) as got:
            assert not got
    finally:
        holder.kill()
        holder.wait()
    with store.run_lock(_spec(0.001), wait=False) as got:
        assert got  # released by the kernel when its holder died


PROBES = ["probes", "--dataset", "mnist1d", "--d-hidden", "16", "--num-blocks", "1", "--method", "fa", "--seeds", "1",
          "--epochs", "1", "--probe-batches", "1", "--probe-batch-size", "64"]


def test_two_different_probes_into_one_folder_never_mix(tmp_path, cache):
    """4 trials: probes of one method with different α grids (or warm starts) into one folder at once: one is
    refused in one line before it trains, the folder's probes_fa.* are the winner's alone."""
    variants = [(["--alphas", "0", "1"], ["--alphas", "0", "0.5"]),  # (neither holds the other: a grid that does
                # grows the folder, as an audit's methods do)
                (["--alphas", "0", "1"], ["--alphas", "0", "1", "--pre-epochs", "1"])]

    def trial(i):
        a, b = variants[i % 2] if i < 2 else variants[i % 2][::-1]
        out = tmp_path / f"t{i}"
        return (a, b), _pair([*PROBES, *a], [*PROBES, *b], out, cache), out

    with ThreadPoolExecutor(2) as pool:
        trials = list(pool.map(trial, range(4)))
    for (a, b), res, out in trials:
        assert sorted(rc for rc, _ in res) == [0, 2], res
        winner = [args for args, (rc, _) in zip((a, b), res, strict=True) if rc == 0][0]
        loser_err = [err for rc, err in res if rc == 2][0]
        assert len(_error_lines(loser_err)) == 1 and "belongs to another probes" in loser_err, loser_err
        assert "Traceback" not in loser_err and not _trained(loser_err), loser_err
        doc = json.loads((out / "probes_fa.json").read_text())
        alphas = [float(x) for x in winner[1:winner.index("--pre-epochs")]] if "--pre-epochs" in winner \
            else [float(x) for x in winner[1:]]
        assert [r["alpha"] for r in doc["credit_mix"]["rows"]] == alphas
        assert ("warm_start" in doc) == ("--pre-epochs" in winner)
        claim = json.loads((out / "probes_fa.identity.json").read_text())
        assert claim["identity"]["alphas"] == alphas


def test_probes_of_two_methods_share_a_folder(tmp_path, cache):
    """Each method's probes are their own report: fa and dfa into one folder at once both finish."""
    res = _pair(PROBES, [*PROBES, "--method", "dfa"], tmp_path / "o", cache)
    assert [rc for rc, _ in res] == [0, 0], res
    assert (tmp_path / "o" / "probes_fa.json").exists() and (tmp_path / "o" / "probes_dfa.json").exists()


def test_an_audit_folder_grows_by_methods_and_seeds_and_never_shrinks(tmp_path, capsys):
    """More methods or seeds into an audit folder: stored runs reused (not retrained), one report of all; fewer
    methods: refused in one line naming what the folder holds, nothing changed."""
    import json

    from depthaudit.cli import main

    tiny = ["audit", "--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1",
            "--probe-batches", "1", "--out", str(tmp_path / "a")]
    assert main([*tiny, "--methods", "bp"]) == 0
    first = {p: p.stat().st_mtime_ns for p in (tmp_path / "a" / "runs").glob("*/result.json")}
    assert len(first) == 2
    capsys.readouterr()
    assert main([*tiny, "--methods", "bp", "fa"]) == 0
    assert "2 of 4 runs already finished" in capsys.readouterr().err
    assert all(p.stat().st_mtime_ns == t for p, t in first.items())  # BP's pair not retrained
    doc = json.loads((tmp_path / "a" / "report.json").read_text())
    assert [m["method"] for m in doc["methods"]] == ["bp", "fa"] and doc["methods"][1].get("cka_to_bp")
    before = (tmp_path / "a" / "report.json").read_bytes()
    assert main([*tiny, "--methods", "fa"]) == 2
    err = capsys.readouterr().err
    assert "to add to it, name everything it holds too (methods bp fa)" in err and err.count("\n") == 1, err
    assert (tmp_path / "a" / "report.json").read_bytes() == before
    assert main([*tiny, "--methods", "fa", "bp", "--seeds", "42", "1"]) == 0  # seeds grow too (order free)
    doc = json.loads((tmp_path / "a" / "report.json").read_text())
    assert doc["config"]["seeds"] == [42, 1] and doc["methods"][0]["n_seeds"] == 2
    assert main([*tiny, "--methods", "bp", "fa", "--seeds", "42", "1", "--lr", "0.002"]) == 2  # else: refused
    assert "differs in lr)" in capsys.readouterr().err


def test_an_audit_overtaken_by_a_larger_one_stores_its_runs_and_leaves_the_report(tmp_path):
    """Two real processes: A (bp) is running when B (bp, fa) grows the folder; B trains only fa and waits for A's
    runs; A, coming to its report, says the folder grew (exit 2); B writes the report of both."""
    import json
    import os
    import subprocess
    import sys

    out = tmp_path / "a"
    base = [sys.executable, "-m", "depthaudit", "audit", "--dataset", "mnist1d", "--d-hidden", "64",
            "--num-blocks", "2", "--epochs", "60", "--probe-batches", "1", "--out", str(out)]
    # (60 epochs: A still trains when B, a new process, has started and claimed, on a loaded machine too)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    a = subprocess.Popen([*base, "--methods", "bp"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    try:
        for line in a.stderr:
            if "epoch 1/60" in line:
                break
        b = subprocess.run([*base, "--methods", "bp", "fa"], env=env, capture_output=True, text=True, timeout=600)
        a_err = a.stderr.read()
        a_rc = a.wait(timeout=600)
    finally:
        if a.poll() is None:
            a.kill()
    print("A:", a_rc, a_err.strip().splitlines()[-1], "| B:", b.returncode)
    assert b.returncode == 0, b.stderr
    assert a_rc == 2 and "was extended by another audit (more methods)" in a_err, a_err
    doc = json.loads((out / "report.json").read_text())
    assert [m["method"] for m in doc["methods"]] == ["bp", "fa"]
    assert len(list((out / "runs").glob("*/result.json"))) == 4
