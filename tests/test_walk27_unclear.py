"""Walk 27's unclear cases, settled (docs/walks/walk27_cases.txt): each as the walker ran it, and what it now says."""

import json

import pytest
import torch
from _util import TinyNet

import depthaudit as da
from depthaudit.api import _fitted_recipe
from depthaudit.cli import main
from depthaudit.methods import METHODS
from depthaudit.models import MODELS, ResidualAdapter
from depthaudit.report.card import _headers, _title

C = ["--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1"]
SMALL = ["--probe-batches", "1", "--probe-batch-size", "32"]


def _argv(cmd):
    small = SMALL if cmd[0] in ("audit", "ladder", "probes") else []
    c = [*(a.replace("--num-blocks", "--base-blocks") for a in C), "--family", "resmlp"] if cmd[0] == "saturation" \
        else C
    return [cmd[0], *c, *cmd[1:], *small]


def _files(folder):
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


@pytest.mark.parametrize("first,second", [
    (["ladder", "--methods", "bp", "--seeds", "1"], ["train"]),  # case 159: train moved into a ladder's folder
    (["train"], ["ladder", "--methods", "bp", "--seeds", "1"]),  # case 159: a ladder into a train's folder
    (["probes", "--method", "fa", "--seeds", "1", "--alphas", "0", "1"], ["audit", "--methods", "bp", "--seeds", "1"]),
    (["audit", "--methods", "bp", "--seeds", "1"], ["probes", "--method", "fa", "--seeds", "1", "--alphas", "0"]),
    (["train"], ["probes", "--method", "fa", "--seeds", "1", "--alphas", "0"]),  # case 168
    (["saturation", "--extra", "0"], ["train"]),
])
def test_a_folder_holds_one_commands_results(tmp_path, capsys, first, second):
    """Cases 159, 167, 168: train, audit and probes wrote beside a ladder's, a probes' or a train's results (and a
    train took a ladder folder's claim); now each is refused in one line, exit 2, writing nothing."""
    out = tmp_path / "o"
    assert main([*_argv(first), "--out", str(out)]) == 0
    before = _files(out)
    capsys.readouterr()
    assert main([*_argv(second), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    print(err[-1])
    assert err[-1].startswith(f"depthaudit: error: {out} holds the results of another command ({first[0]}")
    assert err[-1].endswith(f"{second[0]} cannot write there: use another --out")
    assert _files(out) == before  # nothing written, no lock file either


def test_the_file_layout_sweeps_share_a_folder(tmp_path, capsys):
    """A ladder and a saturation sweep (each store under its own file name) still share one folder."""
    out = str(tmp_path / "o")
    assert main(["ladder", *C, "--methods", "bp", "--seeds", "1", *SMALL, "--out", out]) == 0
    assert main([*_argv(["saturation", "--extra", "0"]), "--out", out]) == 0
    names = {p.name for p in (tmp_path / "o").iterdir()}
    assert {"ladder_d8_L1_mnist1d.json", "saturation_resmlp_bp_mnist1d.json"} <= names, names


def test_ladder_columns_are_the_files_whatever_renders_them(tmp_path, capsys):
    """Case 124 (walk 29 case 6): the ladder command rendered --methods' order, and `report` then rewrote the file's
    table in another; a ladder file gathers several commands' methods, so both render its order (by name)."""
    out = tmp_path / "l"
    assert main(["ladder", *C, "--methods", "fa", "bp", "dfa", "--seeds", "1", *SMALL, "--out", str(out)]) == 0
    head = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| k"))
    print(head)
    assert head.endswith("| bp | dfa | fa |")
    md = (out / "ladder_d8_L1_mnist1d.md").read_text()
    assert main(["report", str(out)]) == 0
    assert (out / "ladder_d8_L1_mnist1d.md").read_text() == md


def test_the_ladders_folder_refusal_names_the_spelling_typed(tmp_path, capsys):
    """Case 109: `ladder --out afile/sub` was answered about --output_dir."""
    (tmp_path / "afile").write_text("x")
    for flag in ("--out", "--output_dir", "--output-dir"):
        assert main(["ladder", *C, flag, str(tmp_path / "afile" / "sub")]) == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        print(err)
        assert err.startswith(f"depthaudit: error: {flag} ") and err.endswith(f"choose another {flag}")


def _card_report(**config):
    b = {"dataset": "mnist1d", "arch": "resmlp", "variant": "ref", "d_hidden": 8, "num_blocks": 1, "epochs": 1}
    return {"config": {"base": b, "methods": ["bp"], "seeds": [1], "probe_batches": 1, "probe_batch_size": 8,
                       **config},
            "methods": [{"method": "bp"}],
            "thresholds": {"rho_max": 50, "ref_factor": 10, "eps": 1e-8, "gap_min_pp": 2}}


def test_a_cards_d1_statistic_and_a_plugin_models_variant():
    """Case 153: a mean-based D1 looked like the median's on the card; case 129: a plug-in model read "(ref)"."""
    assert "D1 statistic" not in _title(_card_report()) and "(ref)" in _title(_card_report())
    rep = _card_report(d1_stat="mean")
    print(_title(rep), _headers(rep)[4])
    assert _title(rep).endswith("; D1 statistic mean") and _headers(rep)[4] == "D1 ρ (mean, flag >50)"
    assert _headers(_card_report())[4] == "D1 ρ (flag >50)"

    @MODELS.register("w27-plain")
    def plain(input_shape, num_classes, d_hidden=8, num_blocks=1, mlp_ratio=1, seed=0):
        raise AssertionError("not built")

    try:
        rep = _card_report()
        rep["config"]["base"]["arch"] = "w27-plain"
        print(_title(rep))
        assert "w27-plain d=8" in _title(rep) and "(ref)" not in _title(rep)
    finally:
        MODELS._items.pop("w27-plain", None)
        MODELS._meta.pop("w27-plain", None)


def test_the_fresh_b_card_shows_what_its_z_is_made_of(tmp_path, capsys):
    """Case 156: z = (Γ on probe batch 1 − null mean) / null std, and neither that Γ nor the std was on the card."""
    out = tmp_path / "a"
    assert main(["audit", *C, "--methods", "dfa", "--seeds", "1", *SMALL, "--functional", "--fresh-b-draws", "4",
                 "--out", str(out)]) == 0
    card = capsys.readouterr().out
    fb = json.loads((out / "report.json").read_text())["methods"][0]["functional"]["fresh_b_null"]
    rows = {line.split("|")[2].strip(): line for line in (out / "report.md").read_text().splitlines()
            if line.startswith("| dfa |") and len(line.split("|")) > 3}
    for name in ("Γ, probe batch 1", "fresh-B null Γ", "fresh-B null std", "z vs null"):
        assert name in rows and name in card, name
    for t, m, s, z in zip(fb["trained"], fb["null_mean"], fb["null_std"], fb["z"], strict=True):
        print(t["mean"], m["mean"], s["mean"], z["mean"])
        assert z["mean"] == pytest.approx((t["mean"] - m["mean"]) / s["mean"], rel=1e-9)  # one seed: a law


def test_fa_names_the_users_block_class():
    """Case 127: the refusal named the adapter's wrapper class (_Delta), not the user's block (here TinyBlk)."""
    torch.manual_seed(0)
    model = ResidualAdapter(TinyNet(4, 8, 1, 3), embed="stem", blocks="layers", readout="head",
                            block_includes_residual=True)
    with pytest.raises(da.UsageError) as e:
        METHODS.get("fa")(model, 0)
    print(e.value)
    assert "on block 1 (TinyBlk)" in str(e.value)


def test_the_fitting_rule_is_one_rule():
    """Review: _fit_batch and same_audit read one rule (a batch above the split; a warm-up of no step)."""
    assert _fitted_recipe(100, 500, "fa", 0.5, 3) == (100, "fa", 0.5)  # batch 100, 3 steps: 1.5 → 2 under it
    assert _fitted_recipe(100, 50, "fa", 0.2, 2) == (50, "fa", 0.2)  # 0.2 × 4 steps = 0.8 → 1 step under it
    assert _fitted_recipe(100, 100, "fa", 0.2, 1) == (100, None, 0.2)  # 0.2 × 1 step → 0: no warm-up
    assert _fitted_recipe(100, 10, None, 0.5, 3) == (10, None, 0.5)


def test_an_audit_says_which_figure_it_did_not_draw(tmp_path, capsys):
    """Case 116: a diverged audit wrote "3 figures" and did not say the per-sample cosines had nothing to plot."""
    out = str(tmp_path / "d")
    assert main(["audit", *C, "--methods", "bp", "--seeds", "1", *SMALL, "--optimizer", "sgd", "--lr", "1e30",
                 "--out", out]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    print(last)
    assert last.endswith("and 3 figures (per_sample_cosine.png not drawn: no run has a measurement to plot there, "
                         "e.g. every run diverged)")


def test_a_cross_check_against_an_audit_of_another_recipe_says_so(tmp_path, capsys):
    """Case 53: `report L --audit-dir G` (G at another --lr) read "not in audit" for every run, as if runs were
    missing; now the ladder's markdown says the audit is of another recipe and where it differs."""
    lad, aud = str(tmp_path / "l"), str(tmp_path / "a")
    assert main(["ladder", *C, "--methods", "bp", "--seeds", "1", *SMALL, "--out", lad]) == 0
    assert main(["audit", *C, "--methods", "bp", "--seeds", "1", *SMALL, "--lr", "0.003", "--out", aud]) == 0
    assert main(["report", lad, "--audit-dir", aud]) == 0
    md = (tmp_path / "l" / "ladder_d8_L1_mnist1d.md").read_text()
    print(md.partition("## Cross-check with the audit")[2])
    assert f"The audit in `{aud}` is of another recipe (differs in: lr)" in md
    assert main(["audit", *C, "--methods", "bp", "--seeds", "1", *SMALL, "--out", aud + "2"]) == 0
    assert main(["report", lad, "--audit-dir", aud + "2"]) == 0  # the same recipe: rows compared, no such line
    md = (tmp_path / "l" / "ladder_d8_L1_mnist1d.md").read_text()
    assert "another recipe" not in md and "| yes |" in md


def test_a_folder_mixed_before_the_rule_stays_its_commands_to_rerun_and_report(tmp_path, capsys):
    """A folder that already holds a train's and a ladder's results (written before folders were one command's):
    each command reruns and `report` renders, as before; a third kind is still refused."""
    out = tmp_path / "m"
    lad = ["ladder", *C, "--methods", "bp", "--seeds", "1", *SMALL, "--out", str(out)]
    assert main(lad) == 0
    t = tmp_path / "t"
    assert main(["train", *C, "--out", str(t)]) == 0
    for name in ("result.json", "identity.json"):  # as walk 27 made it: a train's result beside the ladder's
        (out / name).write_bytes((t / name).read_bytes())
    capsys.readouterr()
    assert main(lad) == 0
    assert "runs already finished" in capsys.readouterr().err
    assert main(["report", str(out)]) == 0
    assert main(["audit", *C, "--methods", "bp", "--seeds", "1", *SMALL, "--out", str(out)]) == 2
    assert "holds the results of another command (train)" in capsys.readouterr().err
