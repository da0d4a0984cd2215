"""Depth families are a registry: the CLI's --family choices are its keys, and a user's own family runs end to end."""

import argparse
import json

import pytest

from depthaudit.cli import main
from depthaudit.commands import build_parser
from depthaudit.experiments.families import FAMILIES, DepthFamily


def _family_choices(command: str) -> list[str]:
    p = build_parser([command])
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    return list(next(a for a in sub.choices[command]._actions if a.dest == "family").choices)


def test_family_choices_are_the_registry():
    assert _family_choices("saturation") == FAMILIES.names() == ["gpt", "hf", "resmlp", "resnet"]
    assert _family_choices("grow") == [n for n in FAMILIES.names() if FAMILIES.get(n).growable] == ["resmlp", "resnet"]
    with pytest.raises(ValueError, match="is taken: it is depthaudit.s own"):
        FAMILIES.register("resnet")(DepthFamily)


@pytest.fixture
def plain_mlp():
    from depthaudit.models import build_model

    class PlainMLP(DepthFamily):
        help = "the reference ResMLP, d=16, under plain backprop (this test's own family)"

        def build(self, run, data, device):
            return build_model("resmlp", data.input_shape, data.num_classes, 16, run.base_blocks + run.extra, None,
                               run.seed).to(device)

    FAMILIES.register("plain-mlp")(PlainMLP)
    yield FAMILIES.get("plain-mlp")
    FAMILIES._items.pop("plain-mlp")
    FAMILIES._meta.pop("plain-mlp")


def test_a_registered_family_is_a_choice_runs_and_renders(plain_mlp, tmp_path, capsys):
    assert "plain-mlp" in _family_choices("saturation") and "plain-mlp" not in _family_choices("grow")
    out = tmp_path / "s"
    assert main(["saturation", "--family", "plain-mlp", "--dataset", "mnist1d", "--epochs", "1", "--extra", "0", "2",
                 "--analysis-batches", "1", "--out", str(out)]) == 0
    doc = json.loads((out / "saturation_plain-mlp_mnist1d.json").read_text())
    assert doc["identity"]["family"] == "plain-mlp" and sorted(doc["runs"]) == ["N0", "N2"]
    for rec in doc["runs"].values():
        s = rec["signal"]
        assert rec["blocks"] == 1 + rec["config"]["extra"] and len(s["AG"]) == rec["blocks"] + 1
        assert all(v <= a * (1 + 1e-9) for v, a in zip(s["V"], s["AG"], strict=True))
        assert len(rec["matched"]["delta"]) == rec["blocks"] + 1 and "credit" not in s  # plain backprop
    md = (out / "saturation_plain-mlp_mnist1d.md").read_text()
    assert md.startswith("# Depth saturation: plain-mlp on mnist1d, 1 epochs") and "| 3 (N=2) |" in md
    capsys.readouterr()
    assert main(["saturation", "--family", "plain-mlp", "--method", "fa", "--dataset", "mnist1d",
                 "--out", str(tmp_path / "m")]) == 2
    assert "the plain-mlp family takes no method (it always trains with plain backprop" in capsys.readouterr().err
    FAMILIES._items.pop("plain-mlp")  # a plug-in not imported when the report is rebuilt: generic titles, same table
    try:
        (out / "saturation_plain-mlp_mnist1d.md").unlink()
        assert main(["report", str(out)]) == 0
        assert (out / "saturation_plain-mlp_mnist1d.md").read_text() == md
    finally:
        FAMILIES._items["plain-mlp"] = plain_mlp


@pytest.mark.parametrize("kind, says", [
    ("linear", "its build() returned a Linear, not a residual model with its blocks"),
    ("wrong-logits", "the model returns logits of shape (2, 15) for 2 examples of mnist1d, not (2, 10)")])
def test_a_family_whose_build_gives_no_residual_model_or_the_wrong_logits_is_one_line(tmp_path, capsys, kind, says):
    """Walk 14 cases 93, 94: nn.Linear was told to check its credits; 15 logits for 10 classes was stored."""
    import torch

    from depthaudit.models import build_model

    class Odd(DepthFamily):
        help = "a family whose build() is wrong (this test's)"

        def build(self, run, data, device):
            if kind == "linear":
                return torch.nn.Linear(40, 10)
            return build_model("resmlp", data.input_shape, 15, 8, run.base_blocks + run.extra, None, run.seed)

    FAMILIES.register("odd")(Odd)
    try:
        out = tmp_path / kind
        assert main(["saturation", "--family", "odd", "--dataset", "mnist1d", "--epochs", "1", "--extra", "0",
                     "--analysis-batches", "1", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        print(err)
        last = err.strip().splitlines()[-1]
        assert last.startswith("depthaudit: error: --family odd (") and says in last and "credit" not in last
        assert "test_families.py" in last
        for f in out.glob("saturation_odd_*.json"):  # the sweep's claim, if written: no run stored in it
            assert json.loads(f.read_text())["runs"] == {}
    finally:
        FAMILIES._items.pop("odd")
        FAMILIES._meta.pop("odd", None)


def test_a_growable_family_without_grow_arm_is_refused_before_anything_is_written(plain_mlp, tmp_path, capsys):
    """Walk 16 cases 107, 108: growable=True with no grow_arm started the run, then failed with "this family cannot
    grow", leaving a half-started store that report advised rerunning."""
    plain_mlp.growable = True
    try:
        out = tmp_path / "g"
        assert main(["grow", "--family", "plain-mlp", "--dataset", "mnist1d", "--epochs", "1", "--extra", "1",
                     "--out", str(out)]) == 2
        err = capsys.readouterr().err
        print(err)
        assert "--family plain-mlp (" in err and "marked growable but defines no grow_arm" in err
        assert not out.exists() or not any(out.iterdir())
    finally:
        plain_mlp.growable = False
