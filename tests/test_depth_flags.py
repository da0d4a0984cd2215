"""The depth commands' flags are their configs' fields: a field declared on SaturationConfig/GrowConfig is a flag
of `saturation`/`grow` with its help, default, range and group; bad values are one line and exit 2; old spellings
parse; the cells of a sweep are built from its config (no field declared twice); --epochs/--stop-after mean the
same from Python and from the shell."""

from dataclasses import dataclass, fields

import pytest

import depthaudit.experiments.saturation as saturation_module
from depthaudit.cli import main
from depthaudit.commands import build_parser
from depthaudit.errors import ConfigError
from depthaudit.experiments.grow import GrowConfig, GrowRun
from depthaudit.experiments.pretrained import PretrainedRun
from depthaudit.experiments.saturation import MEASURE, SaturationConfig, SaturationRun
from depthaudit.fields import arg


@dataclass(frozen=True, kw_only=True)
class WithNewOption(SaturationConfig):
    """SaturationConfig plus one option declared the one way a depth option is declared."""

    probe_stride: int = arg(3, help="stride of a new probe of the sweep", lo=2, group=MEASURE)


def _group(text: str, title: str) -> str:
    """The lines of the help group ``title`` (up to the next blank line)."""
    return text.split(f"\n{title}:\n", 1)[1].split("\n\n", 1)[0]


def test_a_field_added_to_the_config_is_a_flag_with_its_help_range_and_group(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(saturation_module, "SaturationConfig", WithNewOption)
    assert main(["saturation", "--help"]) == 0
    measurement = " ".join(_group(capsys.readouterr().out, "measurement").split())
    assert "--probe-stride N stride of a new probe of the sweep (default: 3)" in measurement
    # its range, from the declaration: one line, exit 2, nothing written
    assert main(["saturation", "--probe-stride", "1", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--probe-stride" in err[0] and "must be >= 2" in err[0], err
    assert not (tmp_path / "o").exists()
    # a value given reaches the config the API takes; not given, the dataclass's default
    from depthaudit.commands.depth import depth_config

    for argv, want in ((["--probe-stride", "5"], 5), (["--probe_stride", "4"], 4), ([], 3)):
        full = ["saturation", *argv, "--out", "unused"]
        assert depth_config(WithNewOption, build_parser(full).parse_args(full)).probe_stride == want
    with pytest.raises(ConfigError, match="^probe_stride must be >= 2, got 1") as exc:  # the same range, in Python
        WithNewOption(probe_stride=1)
    assert exc.value.for_cli() == "--probe-stride must be >= 2, got 1"


BAD = [
    (["saturation", "--extra", "0", "-2"], "--extra", ">= 0"),
    (["saturation", "--analysis-batches", "0"], "--analysis-batches", ">= 1"),
    (["saturation", "--low-signal", "0"], "--low-signal", "> 0"),
    (["saturation", "--alpha", "nan"], "--alpha", "finite"),
    (["saturation", "--margin", "-1"], "--margin", ">= 0"),
    (["saturation", "--base-width", "0"], "--base-width", ">= 1"),
    (["saturation", "--analysis-split", "val"], "--analysis-split", "invalid choice"),
    (["saturation", "--grow-train", "some"], "--grow-train", "invalid choice"),
    (["saturation", "--family", "nope"], "--family", "invalid choice"),
    (["saturation", "--importance", "0"], "--importance", ">= 1"),
    (["saturation", "--continue-lr", "0"], "--continue-lr", "> 0"),
    (["saturation", "--epochs", "x"], "--epochs", "not an integer"),
    (["grow", "--extra", "0"], "--extra", ">= 1"),
    (["grow", "--insert-at", "0"], "--insert-at", ">= 1"),
    (["grow", "--family", "gpt"], "--family", "invalid choice"),  # not growable
    (["grow", "--arch", "nope"], "--arch", "invalid choice"),
    (["grow", "--lr", "-1"], "--lr", "> 0"),
]


@pytest.mark.parametrize("argv,flag,why", BAD, ids=lambda x: " ".join(x) if isinstance(x, list) else None)
def test_bad_values_are_one_line_and_exit_2(argv, flag, why, capsys, tmp_path):
    assert main([*argv, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0] and why in err[0], err
    assert not (tmp_path / "o").exists()


def test_the_same_ranges_refuse_a_config_built_in_python():
    for cls, kw, flag in ((SaturationConfig, {"extra": (0, -1)}, "--extra"),
                          (SaturationConfig, {"analysis_batches": 0}, "--analysis-batches"),
                          (SaturationConfig, {"importance": (0,)}, "--importance"),
                          (SaturationConfig, {"lr": 0.0}, "--lr"),
                          (GrowConfig, {"extra": 0}, "--extra"),
                          (GrowConfig, {"insert_at": (0, 1)}, "--insert-at"),
                          (GrowConfig, {"weight_decay": -1.0}, "--weight-decay")):
        with pytest.raises(ConfigError, match=f"^{flag[2:].replace('-', '_')} ") as exc:  # Python: the keyword
            cls(**kw)
        assert exc.value.for_cli().startswith(flag)  # the CLI: the flag


def test_old_spellings_and_the_documented_ones_parse():
    argv = ["saturation", "--d_hidden", "8", "--base_blocks", "2", "--analysis_batches", "3", "--low_signal", "0.01",
            "--analysis_split", "train", "--continue_steps", "2", "--output_dir", "x", "--batch_size", "16",
            "--extra", "0", "1", "--importance"]
    a = build_parser(argv).parse_args(argv)
    assert (a.d_hidden, a.base_blocks, a.analysis_batches, a.low_signal, a.analysis_split, a.continue_steps, a.out,
            a.batch_size, a.extra, a.importance) == (8, 2, 3, 0.01, "train", 2, "x", 16, [0, 1], [])
    argv = ["grow", "--insert_at", "1", "1", "--output-dir", "y", "--base_width", "32", "--weight_decay", "0"]
    a = build_parser(argv).parse_args(argv)
    assert a.insert_at == [1, 1] and a.out == "y" and a.base_width == 32 and a.weight_decay == 0.0


def test_flags_not_given_are_the_dataclass_defaults_and_repeats_are_kept_where_they_mean_something():
    from depthaudit.commands.depth import depth_config

    for cmd, cls in (("saturation", SaturationConfig), ("grow", GrowConfig)):
        argv = [cmd, "--out", "unused"]
        assert depth_config(cls, build_parser(argv).parse_args(argv)) == cls()
    argv = ["grow", "--extra", "2", "--insert-at", "1", "1", "--out", "unused"]  # two blocks at epoch 1
    assert depth_config(GrowConfig, build_parser(argv).parse_args(argv)).insert_at == (1, 1)
    argv = ["saturation", "--extra", "0", "3", "0", "--out", "unused"]  # a depth twice is one depth
    assert depth_config(SaturationConfig, build_parser(argv).parse_args(argv)).extra == (0, 3)


def test_help_is_grouped_shows_defaults_and_fits_a_screen(capsys):
    for cmd, groups in (("saturation", ("model", "data and recipe", "measurement", "pretrained models (--family hf)",
                                        "sweep execution (README: on a cluster)")),
                        ("grow", ("model", "data and recipe", "sweep execution (README: on a cluster)"))):
        assert main([cmd, "--help"]) == 0
        text = capsys.readouterr().out
        assert len(text.splitlines()) <= 64, cmd
        assert [ln[:-1] for ln in text.splitlines() if ln.endswith(":") and not ln.startswith(" ")][1:] == \
            list(groups), cmd
    main(["saturation", "--help"])
    flat = " ".join(capsys.readouterr().out.split())
    for shown in ("--extra N [N ...] extra blocks N over the base model (default: 0 1 2 3 6)",
                  "--d-hidden N gpt, resmlp: width (default: gpt 64, resmlp 256)",
                  "--batch-size N batch size (default: 128; hf 8)", "--dataset", "(default: cifar10)",
                  "--low-signal X AGmax flag level (default: 0.005)",
                  "resnet (ResNet-8 + N, images) (default: resnet)"):
        assert shown in flat, shown


def test_a_cell_is_its_config_plus_what_varies():
    """No field of a run is declared twice: every value a cell stores is its config's, but the one it varies."""
    cfg = SaturationConfig(family="gpt", d_hidden=32, context=16, extra=(0, 3), seed=5, margin=0.1, lr=2e-3)
    run = cfg.run(3)
    assert {f.name for f in fields(SaturationRun)} == {"config", "extra"}
    assert {f.name for f in fields(GrowRun)} == {"config", "arm", "insert_at"}
    assert {f.name for f in fields(PretrainedRun)} == {"config", "model", "mlp_ratio", "model_sha256", "text_sha256"}
    stored = run.to_dict()  # the record's config: the keys (and order) every earlier version stored
    assert list(stored) == ["dataset", "data_dir", "extra", "epochs", "batch_size", "lr", "weight_decay", "seed",
                            "analysis_batches", "low_signal", "alpha", "device", "family", "text", "context",
                            "d_hidden", "base_blocks", "method", "arch", "analysis_split", "delta", "margin",
                            "base_width", "stop_after"] and stored["extra"] == 3
    assert all(stored[k] == getattr(cfg, k) for k in stored if k != "extra")
    g = GrowConfig(extra=2, epochs=4, lr=5e-4).arm("grown")
    assert g.to_dict()["insert_at"] == [1, 2] and g.lr == 5e-4 and g.to_dict()["lr"] == 5e-4
    p = PretrainedRun(config=SaturationConfig(family="hf", model=("a", "b"), batch_size=8), model="b")
    assert p.to_dict()["model"] == "b" and p.batch_size == 8 and p.to_dict()["mlp_ratio"] == 4
    import pickle

    assert pickle.loads(pickle.dumps(run)) == run  # workers receive cells pickled


def test_epochs_and_stop_after_mean_the_same_from_python_and_the_shell(tmp_path, capsys):
    # no --epochs: the dataset's budget (the text families': 20), checked against --stop-after before any data
    # (a cell listing: were the check missing, nothing would train)
    # the config refuses it where it is built (the API never sees it)
    for make in (lambda: SaturationConfig(family="gpt", epochs=3, stop_after=4),
                 lambda: GrowConfig(dataset="mnist1d", stop_after=21),
                 lambda: SaturationConfig(dataset="cifar10", stop_after=101)):
        with pytest.raises(ConfigError, match=r"^stop_after must be in 1\.\.epochs \((3|20|100)\)"):
            make()
    assert main(["saturation", "--family", "gpt", "--stop-after", "21", "--list-cells", "--out",
                 str(tmp_path / "c")]) == 2
    assert "--stop-after must be in 1..--epochs (20), got 21" in capsys.readouterr().err


def test_every_depth_field_is_named_by_a_cells_record_or_changes_no_result():
    """A field added to a depth config that no cell's record stores would let a stored run be reused for a run it
    is not: each field is named by a cell's KEYS, or is one that changes no result (where the data is fetched)."""
    changes_no_result = {"download"}
    named = set(SaturationRun.KEYS) | set(PretrainedRun.KEYS) | changes_no_result
    assert {f.name for f in fields(SaturationConfig)} - named == set()
    assert {f.name for f in fields(GrowConfig)} - (set(GrowRun.KEYS) | changes_no_result) == set()
    assert {f.name for f in fields(WithNewOption)} - named == {"probe_stride"}  # what the check catches
