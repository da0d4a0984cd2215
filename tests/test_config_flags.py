"""The CLI comes from the config dataclasses: every declared field is a flag whose default, range, choices and
help are the field's own, and the same ranges refuse a config built in Python."""

from dataclasses import MISSING, fields, replace

import pytest

from depthaudit.commands import build_parser
from depthaudit.config import TrainConfig
from depthaudit.errors import ConfigError
from depthaudit.executors import SweepOptions
from depthaudit.experiments.audit import AuditConfig
from depthaudit.experiments.grow import GrowConfig
from depthaudit.experiments.ladder import LadderConfig
from depthaudit.experiments.saturation import SaturationConfig
from depthaudit.fields import flag_name, text_of
from depthaudit.verdicts import Thresholds

# which command lists each config's flags
COMMAND = {TrainConfig: "train", AuditConfig: "audit", Thresholds: "audit", LadderConfig: "ladder",
           SweepOptions: "audit", SaturationConfig: "saturation", GrowConfig: "grow"}


def _declared(cls):
    return [f for f in fields(cls) if "help" in f.metadata and not f.metadata["hidden"]]


def _parser(cmd: str):
    return build_parser([cmd])._subparsers._group_actions[0].choices[cmd]


@pytest.mark.parametrize("cls", list(COMMAND), ids=lambda c: c.__name__)
def test_every_declared_field_is_a_flag_with_its_own_help_and_default(cls):
    p = _parser(COMMAND[cls])
    p._show_all = True
    text = p.format_help()
    by_flag = {s: a for a in p._actions for s in a.option_strings}
    for f in _declared(cls):
        if f.name in ("method", "train_blocks", "credit_mix", "warm_start", "seed") and COMMAND[cls] != "train":
            continue
        a = by_flag[flag_name(f)]
        assert a.dest == f.name and a.default in (None, p.get_default(f.name))
        assert text_of(f.metadata["help"]).split(" {")[0].split("%")[0][:20] in " ".join(text.split()), f.name
        shown = text_of(f.metadata["default_text"]) or (None if f.default is MISSING else f.default)
        assert getattr(a, "field_default", None) == shown, f.name
        assert getattr(a, "advanced", False) == f.metadata["advanced"], f.name
        assert "--" + flag_name(f)[2:].replace("-", "_") in by_flag  # the underscore spelling is accepted too


def test_help_shows_the_field_default_and_follows_it(monkeypatch, capsys):
    from depthaudit.cli import main

    main(["train", "--help"])
    assert "stream width d (default: 256)" in " ".join(capsys.readouterr().out.split())
    # the help reads the field's declaration: change the default in the one place it lives, the help follows
    field = TrainConfig.__dataclass_fields__["d_hidden"]
    monkeypatch.setattr(field, "default", 96)
    main(["train", "--help"])
    assert "stream width d (default: 96)" in " ".join(capsys.readouterr().out.split())


RANGED = [(cls, f) for cls in COMMAND for f in _declared(cls) if f.metadata["lo"] is not None]


@pytest.mark.parametrize("cls,f", RANGED, ids=lambda x: getattr(x, "name", getattr(x, "__name__", "")))
def test_each_range_is_one_declaration_for_the_parser_and_the_config(cls, f, capsys):
    lo = f.metadata["lo"]
    bad = lo if f.metadata["lo_open"] else lo - 1
    kind = int if isinstance(lo, int) and not f.metadata["lo_open"] and "float" not in str(f.type) else float
    cmd = COMMAND[cls]
    argv = [cmd, flag_name(f), str(kind(bad)), "--out" if cmd != "ladder" else "--output_dir", "unused"]
    with pytest.raises(SystemExit) as exc:
        build_parser(argv).parse_args(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert flag_name(f) in err and ("must be" in err or "not a" in err), err
    assert len(err.strip().splitlines()) == 1, err
    ok = [cmd, flag_name(f), str(kind(lo + 1)), "--out" if cmd != "ladder" else "--output_dir", "unused"]
    assert getattr(build_parser(ok).parse_args(ok), f.name) in (kind(lo + 1), (kind(lo + 1),), [kind(lo + 1)])
    if cls is TrainConfig:  # the same declaration refuses the value from Python, naming the keyword there
        with pytest.raises(ConfigError, match=f"^{f.name} ") as exc:
            TrainConfig(**{f.name: kind(bad)})
        assert exc.value.for_cli().startswith(flag_name(f)), exc.value.for_cli()
    if cls is AuditConfig:
        seq = f.name in ("seeds",)
        with pytest.raises(ConfigError, match=f"^{f.name} ") as exc:
            AuditConfig(base=TrainConfig(), **{f.name: (kind(bad),) if seq else kind(bad)})
        assert exc.value.for_cli().startswith(flag_name(f)), exc.value.for_cli()
    if cls in (SaturationConfig, GrowConfig):  # the depth configs too
        seq = "tuple" in str(f.type)
        with pytest.raises(ConfigError, match=f"^{f.name} ") as exc:
            cls(**{f.name: (kind(bad),) if seq else kind(bad)})
        assert exc.value.for_cli().startswith(flag_name(f)), exc.value.for_cli()


def test_flags_not_given_take_the_dataclass_defaults():
    from depthaudit.commands.audit import _audit_config

    argv = ["audit", "--out", "unused"]
    acfg = _audit_config(build_parser(argv).parse_args(argv))
    assert acfg == AuditConfig(base=replace(TrainConfig(), device=acfg.base.device))
    argv = ["audit", "--rho-max", "20", "--gap-min", "-1", "--seeds", "3", "3", "5", "--out", "unused"]
    acfg = _audit_config(build_parser(argv).parse_args(argv))
    assert acfg.thresholds == Thresholds(rho_max=20.0, gap_min_pp=-1.0) and acfg.seeds == (3, 5)
    assert acfg.base.seed == 3


def test_the_budget_is_the_datasets_in_python_and_on_the_command_line():
    from depthaudit.commands.args import config_from_args

    assert TrainConfig().epochs == 20 and TrainConfig(dataset="cifar10").epochs == 100
    assert TrainConfig(dataset="cifar10", epochs=7).epochs == 7
    for ds, budget in (("mnist1d", 20), ("cifar10", 100)):
        argv = ["train", "--dataset", ds]
        assert config_from_args(build_parser(argv).parse_args(argv)).epochs == budget


def test_old_spellings_still_parse():
    argv = ["ladder", "--k-values", "0", "1", "--num_blocks", "1", "--output-dir", "x", "--d_hidden", "8"]
    a = build_parser(argv).parse_args(argv)
    assert a.k_values == [0, 1] and a.num_blocks == 1 and a.output_dir == "x" and a.d_hidden == 8
    argv = ["audit", "--gap_min", "1", "--output_dir", "y", "--probe_batch_size", "4"]
    a = build_parser(argv).parse_args(argv)
    assert a.gap_min_pp == 1.0 and a.out == "y" and a.probe_batch_size == 4
