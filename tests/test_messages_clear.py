"""Messages that were right but unclear in the first independent walk (issue 36): each now names what the user typed
and the fix, once. Real commands in process (``cli.main``), tiny models; each assertion fails on the old wording."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from depthaudit import TrainConfig
from depthaudit.cli import main
from depthaudit.errors import ConfigError, UsageError

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1"]


def _err(capsys) -> str:
    return capsys.readouterr().err


def test_a_warmup_spec_is_named_by_its_own_flag(capsys, tmp_path):
    assert main(["audit", "--warmup", "nope", "--out", str(tmp_path / "a")]) == 2
    err = _err(capsys)
    assert "--warmup 'nope': unknown method 'nope'" in err and len(err.strip().splitlines()) == 1, err
    with pytest.raises(ConfigError, match=r"^warmup 'nope': unknown method"):  # a Python user: the keyword
        TrainConfig(warmup="nope")
    assert not (tmp_path / "a").exists()


def test_a_wrong_choice_lists_the_choices_once():
    with pytest.raises(UsageError) as exc:
        TrainConfig(method="fa", method_options={"head": "bogus"})
    assert str(exc.value).count("feedback, exact") == 1, str(exc.value)


def test_an_unknown_arch_is_refused_where_the_config_is_built():
    with pytest.raises(ConfigError, match=r"arch 'nosuch' not known; use one of .*resmlp"):
        TrainConfig(arch="nosuch")
    TrainConfig(dataset="my-own")  # a dataset name only labels the user's own data (da.train(..., data=...))


def test_report_says_what_a_folder_holds_and_the_fix(capsys, tmp_path):
    """A train folder, a probes folder, an audit whose report.json is gone: each gets its own fix, not 'pass a
    folder depthaudit wrote'."""
    assert main(["train", *TINY, "--out", str(tmp_path / "t")]) == 0
    capsys.readouterr()
    assert main(["report", str(tmp_path / "t")]) == 2
    assert "it holds one training (result.json" in _err(capsys)
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "probes_dfa.md").write_text("# probes\n")
    assert main(["report", str(tmp_path / "p")]) == 2
    assert "their card is probes_dfa.md" in _err(capsys)
    a = tmp_path / "a"
    shutil.copytree(ROOT / "docs" / "results" / "audit_mnist1d", a)
    (a / "report.json").unlink()
    assert main(["report", str(a)]) == 2
    err = _err(capsys)
    assert f"report is missing: rerun the audit or intervene command with --out {a}" in err, err  # (no claim)
    (a / "identity.json").write_text(json.dumps({"schema": "depthaudit.identity.v1", "kind": "audit", "identity": {}}))
    assert main(["report", str(a)]) == 2
    err = _err(capsys)
    assert f"its audit report is missing: rerun the audit command with --out {a}" in err, err


def test_another_commands_folder_is_named_by_its_kind_not_a_config_diff(capsys, tmp_path):
    assert main(["train", *TINY, "--out", str(tmp_path / "t")]) == 0
    capsys.readouterr()
    assert main(["audit", *TINY, "--methods", "bp", "--probe-batches", "1", "--out", str(tmp_path / "t")]) == 2
    err = _err(capsys)
    assert "holds the results of another command (train); audit cannot write there: use another --out" in err, err
    assert "differs in" not in err


def test_a_method_flag_no_chosen_method_reads_names_the_default_method(capsys, tmp_path):
    assert main(["train", "--fa-head", "exact", *TINY[:-2], "--epochs", "0", "--out", str(tmp_path / "t")]) == 0
    assert "--fa-head is an option of" in (err := _err(capsys)) and "none of bp reads it" in err, err


def test_context_without_a_text_family_is_said(capsys, tmp_path):
    main(["saturation", "--family", "resmlp", "--dataset", "mnist1d", "--context", "32", "--list-cells",
          "--out", str(tmp_path / "s")])
    assert "--context has no effect with --family resmlp" in _err(capsys)
    # walk 15 cases 90, 93: --text (even a missing file) was taken without a word; refused, as resnet and grow do
    assert main(["saturation", "--family", "resmlp", "--dataset", "mnist1d", "--text", str(tmp_path / "none.txt"),
                 "--list-cells", "--out", str(tmp_path / "s2")]) == 2
    assert "--text is for --family gpt/hf; --family resmlp trains on --dataset" in _err(capsys)


def test_an_unwritable_home_gives_the_commands_own_line_only(tmp_path):
    """HOME=/proc: matplotlib's two warnings about its config folder are not printed before the command's line."""
    env = {**os.environ, "HOME": "/proc", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src"),
           "DEPTHAUDIT_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("MPLCONFIGDIR", None)
    shutil.copytree(ROOT / "docs" / "results" / "audit_mnist1d", tmp_path / "a")
    p = subprocess.run([sys.executable, "-m", "depthaudit", "report", "a"],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert "Matplotlib" not in p.stderr and "mkdir -p failed" not in p.stderr, p.stderr
    assert p.returncode == 0 and json.loads((tmp_path / "a" / "report.json").read_text())["methods"], p.stderr


def test_a_foreign_unsealed_record_in_a_runs_folder_is_named_when_it_is_retrained(capsys, tmp_path):
    """A record of an --lr 0.002 audit, seal and place removed, copied over the --lr 0.001 audit's record: the
    rerun retrains it and says which record it did not reuse (the walk saw a silent retrain)."""
    args = [*TINY, "--methods", "bp", "--probe-batches", "1"]
    for lr, out in (("0.001", "a"), ("0.002", "b")):
        assert main(["audit", *args, "--lr", lr, "--out", str(tmp_path / out)]) == 0
    capsys.readouterr()

    def strip(p: Path) -> dict:
        rec = json.loads(p.read_text())
        rec.pop("record_sha256", None), rec.pop("stored_in", None)
        return rec

    mine = sorted((tmp_path / "a" / "runs").glob("*_bp_all_*/result.json"))[0]
    for p in (tmp_path / "a" / "runs").glob("*/result.json"):  # a store whose records carry no seal (older)
        p.write_text(json.dumps(strip(p)))
    foreign = sorted((tmp_path / "b" / "runs").glob("*_bp_all_*/result.json"))[0]
    mine.write_text(json.dumps(strip(foreign)))
    (tmp_path / "a" / "report.json").unlink()
    assert main(["audit", *args, "--lr", "0.001", "--out", str(tmp_path / "a")]) == 0
    err = _err(capsys)
    assert f"{mine} holds a run of another configuration" in err and "that run is retrained" in err, err
    assert json.loads(mine.read_text())["config"]["lr"] == 0.001


@pytest.mark.parametrize("lock", [".lock", ".train.lock"])
def test_a_fifo_where_a_lock_belongs_is_one_line_not_a_hang(tmp_path, lock):
    """The second walk: a lock file replaced by a FIFO blocked `open` forever (train, audit, ladder, report).

    Real process, 120 s cap: before the fix it hung until the cap."""
    out = tmp_path / "t"
    assert main(["train", *TINY, "--out", str(out)]) == 0
    (out / lock).unlink()
    os.mkfifo(out / lock)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src"),
           "DEPTHAUDIT_CACHE_DIR": str(tmp_path / "cache")}
    p = subprocess.run([sys.executable, "-m", "depthaudit", "train", *TINY, "--out", str(out), "--force"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 2 and f"{out / lock} is a FIFO (named pipe), not a file depthaudit writes" in p.stderr, \
        p.stderr  # (refused before the lock is opened: walk 28 W8)
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_identity_says_which_training_and_method_flags_change_nothing(capsys, tmp_path):
    """Walk 15 case 39 (walk 9 case 216): --epochs/--lr/--optimizer/--fa-head were accepted by identity silently."""
    argv = ["identity", "--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--probe-batches", "1"]
    assert main([*argv, "--epochs", "7", "--lr", "0.5", "--fa-head", "exact", "--out", str(tmp_path / "a.json")]) == 0
    err = _err(capsys)
    assert "note: --epochs, --lr, --fa-head have no effect with identity" in err, err
    assert err.count("--fa-head") == 1  # said once
    assert main([*argv, "--out", str(tmp_path / "b.json")]) == 0
    assert "no effect" not in _err(capsys)
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("a.json", "b.json"))
    assert a["seeds"] == b["seeds"]  # the same numbers: the flags changed nothing


def test_identity_card_shows_spec_s1_figures_only_beside_the_model_they_were_measured_on():
    """Walk 15 cases 175, 177: SPEC §1's d=256 L=4 figures were printed as the reference beside any width/depth."""
    from depthaudit import TrainConfig
    from depthaudit.api import identity_card

    def card(**kw):
        cfg = TrainConfig(dataset="cifar10", **kw)
        L = cfg.num_blocks
        ms = {"mean": 0.1, "std": 0.0, "n": 2}
        summ = {"block_ratio": [ms] * L, "stack_rel_change": ms, "stack_cos": ms, "per_example_stack_rel_change": ms,
                "per_example_stack_cos": ms, "stream_median_norm": [ms] * (L + 1)}
        return identity_card(cfg, summ, 1280, [42, 43], 128)

    assert "SPEC §1 reference" in card() and "0.196 ± 0.003" in card()  # the reference model: d=256, L=4
    for kw in ({"d_hidden": 16, "num_blocks": 2}, {"num_blocks": 3}, {"mlp_ratio": 4}):
        c = card(**kw)
        assert "SPEC §1 reference" not in c and "0.196" not in c, c
        assert "reference figures are for the reference ResMLP at d=256, L=4" in c
