"""Walk 36's wrong cases, reproduced as the walker did them (docs/walks/walk36_*.txt)."""

import json

import pytest

import depthaudit as da
from depthaudit.cli import main

C = ["--dataset", "mnist1d", "--d-hidden", "16", "--num-blocks", "2", "--epochs", "1"]

NOISY = '''
import torch
from depthaudit.methods import METHODS, CreditMethod, Option
from depthaudit.methods.bp import bp_credits


@METHODS.register("noisy36")
class NoisyBP(CreditMethod):  # extending.md's example: no `name` attribute
    needs_input_grad = True
    options = {"k": Option(1, "an option without a config field", lo=1), "flip": Option(False, "a yes/no")}

    def __init__(self, model, seed, k=1, flip=False):
        super().__init__(model, seed)
        self.k, self.flip = k, flip

    def credits(self, model, tr, e):
        return [g + 0.1 * torch.randn_like(g) * g.pow(2).mean().sqrt() for g in bp_credits(tr)]
'''


@pytest.fixture
def noisy(tmp_path, monkeypatch):
    import sys

    from depthaudit.methods import METHODS

    monkeypatch.setattr(METHODS, "_items", dict(METHODS._items))
    monkeypatch.setattr(METHODS, "_meta", dict(METHODS._meta))
    (tmp_path / "p36n.py").write_text(NOISY)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "p36n"
    sys.modules.pop("p36n", None)


@pytest.mark.parametrize("spec", ["noisy36:k=3", "fg:tangent=rademacher", "cb:credit_at=input"])
def test_a_train_rerun_of_options_left_at_defaults_is_this_configurations(tmp_path, capsys, noisy, spec):
    """W1 (cases 91–93, 167–169): the same train rerun into its folder, with a method option that has no config
    field, was told its config "differs from the folder's claim (identity.json) in method_options.flip …: edited
    after it was written?" — the record holds every option, the claim only those away from their defaults."""
    argv = ["--plugin", noisy, "train", *C, "--method", spec, "--out", str(tmp_path / "T")]
    assert main(argv) == 0
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("result.json already exists (this configuration's); pass --force (force=True) to overwrite "
                        "or choose another output folder"), err
    rec = json.loads((tmp_path / "T" / "result.json").read_text())  # an edit is still named
    rec["config"]["lr"] = 0.5
    (tmp_path / "T" / "result.json").write_text(json.dumps(rec))
    assert main(argv) == 2
    assert "differs from the folder's claim (identity.json) in lr" in capsys.readouterr().err


def test_saturation_under_a_method_class_without_a_name_reports(tmp_path, capsys, noisy):
    """W2 (cases 97, 98, 185–188, 210): `saturation --method M` of a class without `name` (extending.md's own
    example) trained every depth, then ended in an internal error (StopIteration in the figure's label lookup),
    and `report` of the folder the same. The credit's AG is labelled by the method as given."""
    out = tmp_path / "S"
    argv = ["--plugin", noisy, "saturation", "--family", "resmlp", "--method", "noisy36", "--dataset", "mnist1d",
            "--d-hidden", "16", "--epochs", "1", "--extra", "0", "1", "--out", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    doc = json.loads(next(out.glob("saturation_*.json")).read_text())
    assert {r["signal"]["credit"]["method"] for r in doc["runs"].values()} == {"noisy36"}
    assert main(["--plugin", noisy, "report", str(out)]) == 0
    from depthaudit.report.saturation import depth_figure

    for r in doc["runs"].values():  # a store written before: "" (the class's name) still draws
        r["signal"]["credit"]["method"] = ""
    depth_figure(doc, tmp_path / "f.png", 1e-3)
    assert (tmp_path / "f.png").stat().st_size > 0
    assert da.METHODS.get("noisy36").name == ""
