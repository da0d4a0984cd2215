"""Method variants as rows of their own (``name:key=value``), the decision table, and store reuse across versions."""

import json

import pytest

from depthaudit.cli import main
from depthaudit.config import TrainConfig
from depthaudit.errors import UsageError
from depthaudit.methods import parse_method_spec
from depthaudit.runner import run_slug
from depthaudit.sweep import FolderStore, RunSpec
from depthaudit.verdicts import Thresholds, decision_table

BASE = TrainConfig()


def test_spec_sets_exactly_the_named_fields():
    name, cfg = parse_method_spec("fa:head=exact", BASE)
    assert name == "fa" and cfg == TrainConfig(method="fa", fa_head="exact")
    _, cfg = parse_method_spec("fa-stream:identity,scale=0.5", BASE)
    assert cfg.fa_stream_identity is True and cfg.fa_stream_scale == 0.5 and cfg.method == "fa-stream"
    _, cfg = parse_method_spec("ep:beta=0.1,steps=5", BASE)
    assert (cfg.ep_beta, cfg.ep_steps) == (0.1, 5)
    assert parse_method_spec("usf:head=exact", BASE)[1].fa_head == "exact"  # the relatives inherit FA's options
    assert parse_method_spec("dfa", BASE)[1] == TrainConfig(method="dfa")


@pytest.mark.parametrize("spec, words", [("fa:nope=1", "has no option 'nope'"), ("fa:head=sideways", "--fa-head"),
                                         ("ep:steps=x", "not a valid int"), ("dfa:head=exact", "its options: none"),
                                         ("zz:head=exact", "unknown method 'zz'")])
def test_bad_specs_are_one_line(spec, words):
    with pytest.raises(UsageError) as e:
        parse_method_spec(spec, BASE)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_audit_puts_variants_side_by_side(tmp_path, capsys):
    out = tmp_path / "a"
    assert main(["audit", "--methods", "fa", "fa:head=exact", "fa-stream", "fa-stream:identity", "--epochs", "1",
                 "--d-hidden", "16", "--num-blocks", "2", "--probe-batches", "1", "--probe-batch-size", "32",
                 "--out", str(out)]) == 0
    card = capsys.readouterr().out
    rep = json.loads((out / "report.json").read_text())
    assert [m["method"] for m in rep["methods"]] == ["fa", "fa:head=exact", "fa-stream", "fa-stream:identity"]
    runs = [json.loads(p.read_text())["config"] for p in (out / "runs").glob("*/result.json")]
    assert len(runs) == 8  # each variant with its own frozen baseline
    assert sorted((c["method"], c["fa_head"], c["fa_stream_identity"]) for c in runs if c["train_blocks"] == "none") \
        == [("fa", "exact", False), ("fa", "feedback", False), ("fa-stream", "feedback", False),
            ("fa-stream", "feedback", True)]
    assert "fa:head=exact" in card and "fa-stream:identity" in card
    assert main(["audit", "--methods", "fa:head=sideways", "--out", str(tmp_path / "b")]) == 2
    assert not (tmp_path / "b").exists()


def test_decision_table_hand_case():
    th = Thresholds()

    def m(name, acc, gamma, flags):
        return {"method": name, "flags": flags, "standard_pair": {"test_acc": {"mean": acc},
                                                                  "aggregate_cosine_mean_per_layer": {"mean": gamma}}}

    rows = [m("a", 0.60, 0.9, []), m("b", 0.50, 0.3, ["D1", "D2"]), m("c", 0.115, 0.5, ["D3"]),
            m("d", 0.40, -0.01, []), m("e", 0.45, 0.02, ["D3"])]
    d = decision_table(rows, 0.1, th)
    # c: 1.5 pp above chance (< 2 pp) → alarm; d: Γ ≤ 0 → alarm; b and e: positive Γ and accuracy → no alarm
    assert [r["standard_pair_walks_back"] for r in d["rows"]] == [False, False, True, True, False]
    assert [r["protocol_walks_back"] for r in d["rows"]] == [False, True, True, False, True]
    assert d["summary"] == "the standard pair walks back 2 of 5 methods; the protocol 3 of 5"


def test_store_reuses_a_run_written_by_an_older_version(tmp_path):
    """A result stored before a field existed sits under another hash; it is still found (same_as reads it)."""
    cfg = TrainConfig(method="fa", epochs=3)
    spec = RunSpec("fa", cfg, None)
    store = FolderStore(tmp_path)
    old = cfg.to_dict()
    del old["cb_sigma"], old["cb_draws"]  # fields added later
    old["bridge_alpha"], old["init_checkpoint"] = old.pop("credit_mix"), old.pop("warm_start")  # their old names
    slug = run_slug(cfg)[:-8] + "0ld0ld00"
    (tmp_path / slug).mkdir()
    (tmp_path / slug / "result.json").write_text(json.dumps({"config": old, "tracking": None, "final": {}}))
    rec = store.get(spec)
    assert rec is not None and rec["stored_as"] == slug
    assert store.get(RunSpec("fa", TrainConfig(method="fa", epochs=3, fa_head="exact"), None)) is None
    # an old run with a credit mix reads back with it (never reused as a plain run)
    old["bridge_alpha"] = 0.5
    (tmp_path / slug / "result.json").write_text(json.dumps({"config": old, "tracking": None, "final": {}}))
    assert store.get(spec) is None
    assert TrainConfig.from_dict(old).credit_mix == 0.5


def test_store_reuse_ignores_where_the_data_lives_but_checks_its_hash(tmp_path):
    cfg = TrainConfig(method="bp", epochs=2, data_dir="/abs/cifar.zip")
    rec = {"config": TrainConfig(method="bp", epochs=2, data_dir="../rel/cifar.zip").to_dict(), "tracking": None,
           "final": {}, "provenance": {"data": {"sha256": "aaa"}}}
    slug = run_slug(TrainConfig(method="bp", epochs=2, data_dir="../rel/cifar.zip"))
    (tmp_path / slug).mkdir()
    (tmp_path / slug / "result.json").write_text(json.dumps(rec))
    assert FolderStore(tmp_path).get(RunSpec("bp", cfg, None)) is not None
    assert FolderStore(tmp_path, "aaa").get(RunSpec("bp", cfg, None)) is not None
    assert FolderStore(tmp_path, "bbb").get(RunSpec("bp", cfg, None)) is None  # other data: trained again
    assert TrainConfig(method="bp", epochs=3).same_as(rec["config"]) is False
