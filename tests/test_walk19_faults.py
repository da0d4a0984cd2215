"""Walk 19's causes: each reproduced as the walker did it, failing without its fix."""

import json

import pytest

import depthaudit as da
from depthaudit.cli import main


def test_report_of_a_ladder_whose_json_identity_was_edited_names_the_json_not_a_run(tmp_path, capsys):
    """Case 59: an edited identity.lr in ladder_*.json was reported as run 'bp/k0/s1' being malformed, and the
    advised rerun was refused; report now says what the ladder says, and following it works."""
    out = tmp_path / "L"
    assert main(["ladder", "--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1",
                 "--methods", "bp", "--seeds", "1", "--output_dir", str(out)]) == 0
    f = next(out.glob("ladder_*.json"))
    doc = json.loads(f.read_text())
    doc["identity"]["lr"] = 0.01
    f.write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err
    print(err)
    assert "differs from its records' claim" in err and "(in: lr)" in err and "malformed" not in err
    f.rename(tmp_path / f.name)  # as the line says
    assert main(["report", str(out)]) == 0
    assert json.loads(f.read_text())["identity"]["lr"] == 0.001


@pytest.mark.parametrize("make", [lambda: da.SaturationConfig(family="gpt", optimizer="sgd"),
                                  lambda: da.GrowConfig(family="resnet", optimizer="sgd")])
def test_another_optimizer_for_a_family_with_its_own_loop_is_refused_in_keywords(make):
    """Case 90: the refusal said `use saturation --family resmlp` to a Python caller."""
    with pytest.raises(da.ConfigError) as exc:
        make()
    print(exc.value)
    assert exc.value.field == "optimizer" and "use family=resmlp" in str(exc.value) and "--" not in str(exc.value)
    assert "use --family resmlp" in exc.value.render(cli=True)


def test_idle_flags_make_no_other_identity_check_or_training(tmp_path, capsys):
    """Cases 123, 124, 126, 127: identity's idle training flags and train's idle --credit-mix (with bp) were noted
    as having no effect, yet called the same measurement or run "another configuration"."""
    tiny = ["--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "2", "--epochs", "1"]
    out = tmp_path / "id.json"
    assert main(["identity", *tiny, "--seeds", "1", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["identity", *tiny, "--seeds", "1", "--optimizer", "sgd", "--lr", "0.5", "--batch-size", "7",
                 "--epochs", "5", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    print(err)
    assert "have no effect with identity" in err and "note: replaced" not in err
    assert main(["identity", *tiny, "--seeds", "1", "--d-hidden", "16", "--out", str(out)]) == 0
    assert "note: replaced" in capsys.readouterr().err  # a real difference is still said
    assert da.TrainConfig(credit_mix=0.5) == da.TrainConfig()  # bp: BP's credit mixed toward BP is BP's
    assert da.TrainConfig(method="fa", credit_mix=0.5).credit_mix == 0.5
    t = tmp_path / "t"
    assert main(["train", *tiny, "--out", str(t)]) == 0
    capsys.readouterr()
    assert main(["train", *tiny, "--credit-mix", "0.5", "--out", str(t)]) == 2
    err = capsys.readouterr().err
    assert "--credit-mix has no effect with --method bp" in err and "(this configuration's)" in err


def test_an_idle_fresh_b_draws_makes_no_other_audit(tmp_path, capsys):
    """Case 130: --fresh-b-draws without --functional was noted idle, yet refused as "another audit"."""
    tiny = ["--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "2", "--epochs", "1", "--methods", "bp"]
    out = tmp_path / "a"
    assert main(["audit", *tiny, "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["audit", *tiny, "--fresh-b-draws", "3", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "--fresh-b-draws has no effect without --functional" in err and "another audit" not in err
    b = da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=2, epochs=1)
    assert da.AuditConfig(base=b, fresh_b_draws=3) == da.AuditConfig(base=b)
    assert da.AuditConfig(base=b, fresh_b_draws=3, functional=True).fresh_b_draws == 3


def test_depth_sweeps_with_jobs_render_every_run_they_stored(tmp_path):
    """Cases 138, 139, 199: saturation and grow with --jobs 2 wrote an empty table, card and figure."""
    sat = da.saturation(da.SaturationConfig(family="resmlp", dataset="mnist1d", d_hidden=8, extra=(0, 1), epochs=1),
                        tmp_path / "s", sweep=da.SweepOptions(jobs=2), progress=False)
    rows = [ln for ln in sat.card.splitlines() if ln.startswith("| ") and "(N=" in ln]
    print(sat.card)
    assert len(rows) == 2 and sorted(sat.record["runs"]) == ["N0", "N1"]
    assert sum(ln.startswith("| ") and "(N=" in ln for ln in sat.markdown.splitlines()) == 2
    grow = da.grow(da.GrowConfig(family="resmlp", dataset="mnist1d", d_hidden=8, extra=1, epochs=2),
                   tmp_path / "g", sweep=da.SweepOptions(jobs=2), progress=False)
    print(grow.card)
    assert sum(ln.startswith(("| grown", "| scratch")) for ln in grow.card.splitlines()) == 2


def test_depth_sweeps_refuse_another_familys_flags_as_config_errors_and_drop_idle_data_flags(tmp_path, capsys):
    """Cases 164, 172, 173: SaturationConfig(family="resmlp", text=…) was refused later as a plain UsageError in CLI
    words; --data-dir on mnist1d said nothing and retrained every stored depth ("its files changed?")."""
    for kw, field in ((dict(text="/etc/hostname"), "text"), (dict(model=("gpt2",)), "model")):
        with pytest.raises(da.ConfigError) as exc:  # (since walk 20 W1: by the config itself, before any call)
            c = da.SaturationConfig(family="resmlp", dataset="mnist1d", d_hidden=8, extra=(0,), epochs=1, **kw)
            da.saturation(c, tmp_path / "x", progress=False)
        print(exc.value)
        assert exc.value.field == field and "--" not in str(exc.value)
    assert not (tmp_path / "x").exists()
    assert da.SaturationConfig(family="resmlp", dataset="mnist1d", data_dir="/x").data_dir is None
    sat = ["saturation", "--family", "resmlp", "--dataset", "mnist1d", "--d-hidden", "8", "--extra", "0", "--epochs",
           "1", "--out", str(tmp_path / "s")]
    assert main(sat) == 0
    capsys.readouterr()
    assert main([*sat, "--data-dir", "/x"]) == 0
    err = capsys.readouterr().err
    assert "--data-dir has no effect with --dataset mnist1d" in err and "differs in data_dir" not in err


@pytest.mark.parametrize("cmd,name", [
    (["ladder", "--methods", "bp", "--seeds", "1", "--num-blocks", "2", "--output_dir"], "ladder_d8_L2_mnist1d.json"),
    (["saturation", "--family", "resmlp", "--extra", "0", "--out"], "saturation_resmlp_bp_mnist1d.json")])
def test_a_users_json_at_a_sweeps_file_name_is_named_as_not_ours(cmd, name, tmp_path, capsys):
    """Cases 183-186: a user's own JSON there was "claimed by a sweep of a different configuration (differs in …)"."""
    out = tmp_path / "o"
    out.mkdir()
    (out / name).write_text('{"mine": 1}')
    assert main([cmd[0], "--dataset", "mnist1d", "--d-hidden", "8", "--epochs", "1", *cmd[1:], str(out)]) == 2
    err = capsys.readouterr().err
    print(err)
    assert f"{out / name} exists and is not depthaudit's" in err and "differs in" not in err
    assert (out / name).read_text() == '{"mine": 1}'
