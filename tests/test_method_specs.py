"""Method variants as rows of their own (``name:key=value``), the decision table, and store reuse across versions."""

import json

import pytest

from depthaudit.cli import main
from depthaudit.config import TrainConfig
from depthaudit.errors import UsageError
from depthaudit.methods import parse_method_spec, parse_spec, with_flags
from depthaudit.runner import run_slug
from depthaudit.sweep import FolderStore, RunSpec
from depthaudit.verdicts import Thresholds, decision_table

BASE = TrainConfig()


def test_spec_sets_exactly_the_named_options():
    name, cfg = parse_method_spec("fa:head=exact", BASE)
    assert name == "fa" and cfg == TrainConfig(method="fa", method_options={"head": "exact"})
    assert cfg.method_options == {"head": "exact"}
    _, cfg = parse_method_spec("fa-stream:identity,scale=0.5", BASE)
    assert cfg.method_options == {"identity": True, "scale": 0.5} and cfg.method == "fa-stream"
    _, cfg = parse_method_spec("ep:beta=0.1,steps=5", BASE)
    assert cfg.method_options == {"beta": 0.1, "steps": 5, "step_size": 0.5, "credit": "state"}  # defaults filled
    assert parse_method_spec("usf:head=exact", BASE)[1].method_options == {"head": "exact"}  # inherited from FA
    assert parse_method_spec("dfa", BASE)[1] == TrainConfig(method="dfa")


def test_labels_are_canonical_one_per_configuration():
    """``fa:`` and ``fa:head=feedback`` are ``fa``; key order and spelling do not make new rows; a repeat is refused."""
    assert [str(parse_spec(s)) for s in ("fa", "fa:", "fa:head=feedback", " fa:head=exact ")] == \
        ["fa", "fa", "fa", "fa:head=exact"]
    assert str(parse_spec("fa-stream:scale=0.5,identity=yes")) == str(parse_spec("fa-stream:identity,scale=0.50")) \
        == "fa-stream:identity,scale=0.5"
    with pytest.raises(UsageError, match="given twice"):
        parse_spec("fa:head=exact,head=feedback")
    # flags fill what a spec leaves unset, never what it sets (explicit default included)
    assert str(with_flags(parse_spec("fa"), {"fa-head": "exact"})) == "fa:head=exact"
    assert str(with_flags(parse_spec("fa:head=feedback"), {"fa-head": "exact"})) == "fa"
    assert str(with_flags(parse_spec("dfa"), {"fa-head": "exact"})) == "dfa"
    import pickle

    ms = parse_spec("ep:beta=0.1")
    back = pickle.loads(pickle.dumps(ms))  # worker processes receive specs pickled
    assert back == ms and back.name == "ep" and back.given == (("beta", 0.1),)


def test_stored_02_configs_read_back_and_keep_their_names():
    """0.2 kept options as flat fields: they read back into ``method_options`` and the run's hash is unchanged.

    Every run stored under docs/results (written by 0.2) must be found under its own folder name again.
    """
    import pathlib

    flat = {**TrainConfig(method="fa").identity_dict(), "fa_head": "exact"}
    assert TrainConfig.from_dict(flat).method_options == {"head": "exact"}
    assert TrainConfig.from_dict({**flat, "method": "dfa"}).method_options == {}  # fa_head is not dfa's
    root = pathlib.Path(__file__).parent.parent / "docs" / "results"
    checked = 0
    for res in sorted(root.glob("*/runs/*/result.json")):
        rec = json.loads(res.read_text())
        if not {"cb_sigma", "credit_mix", "fa_stream_scale", "penalty_form"} <= set(rec["config"]):
            continue  # written before a later config field: stored under an older hash, found by same_as (tested below)
        assert run_slug(TrainConfig.from_dict(rec["config"]), rec.get("tracking")) == res.parent.name, res
        checked += 1
    print("stored runs whose names the new configs reproduce:", checked)
    assert checked >= 20


def test_a_plugin_method_with_two_options_gets_flags_help_and_validation(tmp_path, capsys):
    """One class with two declared options: spec syntax, generated flags, range checks, recorded options."""
    import textwrap

    (tmp_path / "mine_plugin.py").write_text(textwrap.dedent('''
        from depthaudit.methods import METHODS, Option
        from depthaudit.methods.dfa import DFA

        @METHODS.register("mine")
        class Mine(DFA):
            name = "mine"
            options = {"gain": Option(1.0, "credit gain", lo=0, lo_open=True),
                       "mode": Option("plain", "variant", choices=("plain", "sign"))}

            def __init__(self, model, seed, gain=1.0, mode="plain"):
                super().__init__(model, seed)
                self.gain, self.mode = gain, mode

            def credits(self, model, tr, e):
                cs = super().credits(model, tr, e)
                return [self.gain * (c.sign() if self.mode == "sign" else c) for c in cs]
    '''))
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        assert main(["--plugin", "mine_plugin", "train", "--help-all"]) == 0
        help_text = capsys.readouterr().out
        assert "--mine-gain X" in help_text and "--mine-mode plain|sign" in help_text
        assert main(["--plugin", "mine_plugin", "train", "--method", "mine:gain=-1", "--out", str(tmp_path / "x")]) == 2
        assert "gain: -1.0 must be > 0" in capsys.readouterr().err
        assert main(["--plugin", "mine_plugin", "train", "--method", "mine", "--mine-mode", "sideways",
                     "--out", str(tmp_path / "y")]) == 2
        assert main(["--plugin", "mine_plugin", "train", "--method", "mine:mode=sign", "--mine-gain", "0.5",
                     "--epochs", "1", "--d-hidden", "16", "--num-blocks", "2", "--out", str(tmp_path / "ok")]) == 0
        rec = json.loads((tmp_path / "ok" / "result.json").read_text())
        assert rec["config"]["method"] == "mine" and rec["config"]["method_options"] == {"gain": 0.5, "mode": "sign"}
        assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
    finally:
        sys.path.remove(str(tmp_path))
        from depthaudit.methods import METHODS

        METHODS._items.pop("mine", None)


@pytest.mark.parametrize("spec, words", [("fa:nope=1", "has no option 'nope'"), ("fa:head=sideways", "not one of"),
                                         ("ep:steps=x", "not an integer"), ("dfa:head=exact", "its options: none"),
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
    assert sorted((c["method"], json.dumps(c["method_options"], sort_keys=True)) for c in runs
                  if c["train_blocks"] == "none") == [
        ("fa", '{"head": "exact"}'), ("fa", '{"head": "feedback"}'), ("fa-stream", '{"identity": false, "scale": 1.0}'),
        ("fa-stream", '{"identity": true, "scale": 1.0}')]
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
    old = cfg.identity_dict()
    del old["cb_sigma"], old["cb_draws"]  # fields added later
    old["bridge_alpha"], old["init_checkpoint"] = old.pop("credit_mix"), old.pop("warm_start")  # their old names
    slug = run_slug(cfg)[:-8] + "0ld0ld00"
    (tmp_path / slug).mkdir()
    (tmp_path / slug / "result.json").write_text(json.dumps({"config": old, "tracking": None, "final": {}}))
    rec = store.get(spec)
    assert rec is not None and rec["stored_as"] == slug
    assert store.get(RunSpec("fa", TrainConfig(method="fa", epochs=3, method_options={"head": "exact"}), None)) is None
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
