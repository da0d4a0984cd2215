"""The Python API: one function per command over the CLI's own configs; the CLI is a thin layer over it."""

import json
import pathlib
import subprocess
import sys

import pytest

import depthaudit as da
from depthaudit.cli import main

ROOT = pathlib.Path(__file__).parent.parent
TINY = dict(dataset="mnist1d", d_hidden=16, num_blocks=2, epochs=1)


def _numbers(rec: dict) -> dict:
    """What a run measured (not when or where): final, per-epoch history without wall times, monitor."""
    hist = [{k: v for k, v in h.items() if k != "seconds"} for h in rec["history"]]
    return {"final": rec["final"], "history": hist, "monitor": rec.get("monitor"), "status": rec["status"]}


def test_import_is_light_and_names_resolve():
    """``import depthaudit`` imports no torch; the API names load on first use."""
    code = "import sys, depthaudit; assert 'torch' not in sys.modules; print(sorted(depthaudit.__all__))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "audit" in out and "TrainConfig" in out
    assert callable(da.train) and callable(da.audit) and da.AuditConfig.__name__ == "AuditConfig"
    import depthaudit.loop  # noqa: F401  (the training loop module must not shadow the API's train)

    assert callable(da.train)
    with pytest.raises(AttributeError):
        da.nope  # noqa: B018


def test_audit_from_python_is_the_cli_audit(tmp_path, capsys):
    """The same config from Python and from the shell: one store, the same report; the CLI trains nothing more."""
    cfg = da.AuditConfig(base=da.TrainConfig(**TINY), methods=("bp", "fa:head=feedback", "fa:"), seeds=(1,),
                         probe_batches=1, probe_batch_size=32)
    res = da.audit(cfg, tmp_path / "a", progress=False)
    assert capsys.readouterr().err == ""  # progress=False is silent
    assert [m["method"] for m in res.record["methods"]] == ["bp", "fa"]  # specs parsed once, canonical, deduped
    assert res.path == tmp_path / "a" / "report.json"
    assert json.loads(res.path.read_text())["methods"] == json.loads(json.dumps(res.record["methods"]))
    assert (tmp_path / "a" / "report.md").read_text() == res.markdown
    assert len(res.figures) == 3 and all(f.is_file() for f in res.figures)
    html = res._repr_html_()
    assert html.count("data:image/png;base64,") == 3 and "depthaudit audit" in html
    runs = sorted(p.name for p in (tmp_path / "a" / "runs").iterdir())
    assert main(["audit", "--dataset", "mnist1d", "--d-hidden", "16", "--num-blocks", "2", "--epochs", "1",
                 "--methods", "bp", "fa", "--seeds", "1", "--probe-batches", "1", "--probe-batch-size", "32",
                 "--out", str(tmp_path / "a")]) == 0
    cap = capsys.readouterr()
    assert "4 of 4 already finished" in cap.err or "already" in cap.err  # reused, not retrained
    assert sorted(p.name for p in (tmp_path / "a" / "runs").iterdir()) == runs
    assert res.card in cap.out  # the CLI prints the API's card
    cli = json.loads((tmp_path / "a" / "report.json").read_text())
    assert cli["methods"] == json.loads(json.dumps(res.record["methods"]))


def test_train_from_python_equals_cli_bit_for_bit(tmp_path, capsys):
    cfg = da.TrainConfig(**TINY, method="fa", method_options={"head": "exact"}, seed=3)
    res = da.train(cfg, tmp_path / "py", progress=False)
    assert main(["train", "--dataset", "mnist1d", "--d-hidden", "16", "--num-blocks", "2", "--epochs", "1",
                 "--method", "fa:head=exact", "--seed", "3", "--out", str(tmp_path / "cli")]) == 0
    cli = json.loads((tmp_path / "cli" / "result.json").read_text())
    py = json.loads(res.path.read_text())
    assert py["config"] == cli["config"] and py["config"]["method_options"] == {"head": "exact"}
    assert _numbers(py) == _numbers(cli)
    from depthaudit.errors import UsageError

    with pytest.raises(UsageError, match="already exists"):
        da.train(cfg, tmp_path / "py", progress=False)


def test_ladder_and_identity_from_python(tmp_path):
    lc = da.LadderConfig(base=da.TrainConfig(**TINY), methods=("bp",), k_values=(0, 2), seeds=(1,),
                         probe_batches=1, probe_batch_size=32)
    res = da.ladder(lc, tmp_path / "lad", progress=False)
    assert res.path.name == "ladder_d16_L2_mnist1d.json" and "| k (last blocks trained) | bp |" in res.card
    assert set(json.loads(res.path.read_text())["runs"]) == {"bp/k0/s1", "bp/k2/s1"}
    ident = da.identity(da.TrainConfig(**TINY), seeds=(1, 2), probe_batches=1, probe_batch_size=32,
                        out=tmp_path / "id.json")
    assert "identity at init" in ident.card and len(ident.record["per_seed"]) == 2
    assert json.loads((tmp_path / "id.json").read_text())["summary"] == json.loads(json.dumps(ident.record["summary"]))


def test_results_unchanged_bit_for_bit_by_the_redesign(tmp_path):
    """Runs trained by the code before the options/API redesign (commit f3622fe) retrained today: identical.

    tests/data/before_redesign holds that commit's records of
    ``depthaudit audit --dataset mnist1d --methods fa:head=exact fa-stream:identity dfa --seeds 42 --epochs 4
    --d-hidden 64`` (2 threads). The new code parses the specs into method options, builds each method from its
    declared options and names each run's folder from the same hash: every folder is found again and every
    number of every run (per epoch, probes included) is identical, and so is the report's per-method summary.
    """
    import torch

    ref = ROOT / "tests" / "data" / "before_redesign"
    if torch.get_num_threads() != 2:
        pytest.skip("the reference runs used 2 threads; another thread count changes float summation order")
    out = tmp_path / "again"
    assert main(["audit", "--dataset", "mnist1d", "--methods", "fa:head=exact", "fa-stream:identity", "dfa",
                 "--seeds", "42", "--epochs", "4", "--d-hidden", "64", "--out", str(out)]) == 0
    names = sorted(p.parent.name for p in (out / "runs").glob("*/result.json"))
    assert names == sorted(p.parent.name for p in ref.glob("*/result.json"))  # the same run names (hashes)
    for name in names:
        a = _numbers(json.loads((out / "runs" / name / "result.json").read_text()))
        b = _numbers(json.loads((ref / name / "result.json").read_text()))
        diffs = [k for k in a if a[k] != b[k]]
        print(name, "differs in" if diffs else "identical", diffs)
        assert not diffs
    new, old = (json.loads((d / "report.json").read_text()) for d in (out, ref))
    drop = ("runs", "history")
    assert [{k: v for k, v in m.items() if k not in drop} for m in new["methods"]] == \
        [{k: v for k, v in m.items() if k not in drop} for m in old["methods"]]
