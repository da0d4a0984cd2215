"""The field table (issue 37): every registered method × both optimizers, a stored cell where one exists at the
budget, "not trained" where none does — never a gap hidden, never a cell from another model or budget."""

import os
import shutil
from pathlib import Path

from depthaudit.methods import METHODS
from depthaudit.report.field import main

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"


def test_every_method_and_optimizer_has_a_row_and_only_the_budgets_cells_are_filled(tmp_path, capsys):
    for name in ("audit_cifar10_e100", "which_fa_d512_e100", "audit_cifar10_first5"):
        shutil.copytree(RESULTS / name, tmp_path / name)  # (with its run records: the table checks against them)
    out = tmp_path / "field.md"
    assert main([str(out), *(str(tmp_path / n) for n in ("audit_cifar10_e100", "which_fa_d512_e100",
                                                          "audit_cifar10_first5"))]) == 0
    md = out.read_text()
    rows = [line for line in md.splitlines() if line.startswith("| ") and not line.startswith("| method")]
    assert len(rows) == 2 * len(METHODS.names())  # no extra labels: the d=512 audit's rows are not this model's
    trained = [r for r in rows if "not trained" not in r]
    assert sorted(r.split(" | ")[0][2:] + "/" + r.split(" | ")[1] for r in trained) == \
        ["bp/adamw", "dfa/adamw", "fa/adamw"]  # the 5-epoch audit (its budget stopped early) fills nothing
    bp = next(r for r in trained if r.startswith("| bp | adamw"))
    assert "| 0.608 | 0.382 |" in bp and "+22.5 PASS" in bp and "0.615 ± 0.004 | 0.900 |" in bp, bp
    assert f"3 of {2 * len(METHODS.names())} cells trained" in md and md in capsys.readouterr().out
    assert out.with_suffix(".png").stat().st_size > 0  # the figure beside the table


def test_a_diverged_cell_is_shown_as_diverged_with_its_frozen_twin(tmp_path):
    """The SGD audit at the budget (docs/results/field_sgd_e100: bp, dfa, fa diverged) rendered: each cell says at which
    epoch its run diverged and shows its frozen twin's accuracy from the run records (the report leaves diverged
    pairs out of its means); the figure draws a cross, not a bar (it was a matplotlib TypeError)."""
    shutil.copytree(RESULTS / "field_sgd_e100", tmp_path / "sgd")
    assert main([str(tmp_path / "f.md"), str(tmp_path / "sgd")]) == 0
    md = (tmp_path / "f.md").read_text()
    assert "| bp | sgd (lr 0.003; default 0.0003) | diverged (epoch 10) | 0.377 |" in md
    assert "| dfa | sgd (lr 0.003; default 0.0003) | diverged (epoch 1) | 0.362 |" in md  # (its lr: not the default)
    assert (tmp_path / "f.png").is_file()


def test_an_unwritable_or_empty_out_is_one_line_and_nothing_half_written(tmp_path, capsys):
    """Walk 19 cases 34-36, 39: an OUT.md under a file, in an unwritable place, or '' was a traceback (or read as
    '.'); the table and its figure are written both or neither."""
    from depthaudit.report.field import main as field_main

    (tmp_path / "afile").write_text("x")
    src = str(RESULTS / "field_sgd_e100")
    for out, text in ((str(tmp_path / "afile" / "f.md"), "stands where a folder must be"),
                      ("", "OUT.md '' is an empty path")):
        assert field_main([out, src]) == 2
        err = capsys.readouterr().err
        print(err)
        assert len(err.strip().splitlines()) == 1 and text in err and "Traceback" not in err
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if not os.access(ro, os.W_OK):  # (root writes anywhere: there, the case cannot be made)
            assert field_main([str(ro / "f.md"), src]) == 2
            assert "Traceback" not in capsys.readouterr().err and not list(ro.iterdir())
    finally:
        ro.chmod(0o700)
    assert field_main([str(tmp_path / "new" / "f.md"), src]) == 0
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == ["f.md", "f.png"]


def test_published_figures_stand_only_beside_their_own_dataset_and_budget(tmp_path, capsys):
    """Walk 19 case 30: Table 1's CIFAR-10/100-epoch figures and biotorch's stood beside an mnist1d 1-epoch table."""
    from depthaudit.report.field import field_md

    md = field_md({}, 1, "mnist1d")
    print(md[:400])
    assert "0.615 ± 0.004" not in md and "0.914" not in md
    assert "are not shown beside mnist1d at 1 epochs" in md
    cifar = field_md({}, 100, "cifar10")
    assert "0.615 ± 0.004" in cifar and "0.914" in cifar and "not shown" not in cifar
    short = field_md({}, 30, "cifar10")  # biotorch's CIFAR-10 figures stay (context); Table 1's is of 100 epochs
    assert "0.615 ± 0.004" not in short and "0.914" in short


def test_an_unknown_option_is_named_as_an_option_not_read_as_a_folder(tmp_path, capsys, monkeypatch):
    """Walk 19 case 197: ``--nope`` was read as an audit folder ("--nope: no report.json")."""
    src = str(RESULTS / "field_sgd_e100")
    assert main([str(tmp_path / "f.md"), src, "--nope"]) == 2
    err = capsys.readouterr().err
    print(err)
    assert err.strip() == ("depthaudit: error: unknown option --nope; the options are --epochs N and --dataset NAME "
                           "(--help)")
    assert not list(tmp_path.iterdir())
    folder = tmp_path / "-dash"  # a folder whose name starts with '-' is still a folder
    shutil.copytree(src, folder)
    monkeypatch.chdir(tmp_path)
    assert main(["f.md", "-dash"]) == 0


def test_a_diverged_variant_row_shows_its_epoch_and_frozen_twin(tmp_path):
    """A variant row (cb:credit_at=input) that diverged showed "diverged | —": its runs were matched by name only."""
    assert main([str(tmp_path / "f.md"), str(RESULTS / "field_sgd_lr3e-4_e100")]) == 0
    md = (tmp_path / "f.md").read_text()
    print([r for r in md.splitlines() if "credit_at" in r])
    assert "| cb:credit_at=input | sgd | diverged (epoch 1) | 0.367 |" in md
    assert "| sb:credit_at=input | sgd | diverged (epoch 11) | 0.384 |" in md
