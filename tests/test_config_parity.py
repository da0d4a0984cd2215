"""One truth per fact: every command's config built from the CLI and from Python is the same config.

The CLI only parses flags into the config and the Python API only takes it; the config resolves its own
defaults (budget, k-values, device) and refuses what cannot run, naming the field as the caller wrote it (a flag
on the CLI, a keyword in Python) in one line. Each command is built both ways here (the API function replaced
by a recorder, so nothing trains) and the resolved configs and refusals compared.
"""

import pytest
import torch

import depthaudit as da
from depthaudit import api
from depthaudit.cli import main
from depthaudit.errors import ConfigError
from depthaudit.experiments.grow import GrowConfig
from depthaudit.experiments.saturation import SaturationConfig

NO_CUDA = not torch.cuda.is_available()


def _cli_config(monkeypatch, tmp_path, argv: list[str], fn: str):
    """The config the CLI hands ``api.<fn>`` for ``argv`` (the API call recorded, nothing trained)."""
    seen = {}

    def record(config, *args, **kwargs):
        seen["config"] = config
        raise SystemExit(0)

    monkeypatch.setattr(api, fn, record)
    with pytest.raises(SystemExit):
        main([*argv, "--out", str(tmp_path / "out")])
    return seen["config"]


BASE = dict(dataset="mnist1d", d_hidden=8, num_blocks=2)
BASE_FLAGS = ["--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "2"]

SAME = [  # (command, CLI flags, the API function, the config built in Python with the same inputs)
    ("train", [*BASE_FLAGS, "--epochs", "3", "--lr", "1"], "train",
     lambda: da.TrainConfig(**BASE, epochs=3, lr=1)),
    ("audit", [*BASE_FLAGS, "--methods", "bp", "fa:head=exact", "fa", "--seeds", "7", "3", "7", "--stop-on-flag"],
     "audit", lambda: da.AuditConfig(base=da.TrainConfig(**BASE), methods=["bp", "fa:head=exact", "fa:"],
                                     seeds=[7, 3, 7], stop_on_flag=True)),
    ("ladder", [*BASE_FLAGS, "--methods", "dfa", "--seeds", "5"], "ladder",
     lambda: da.LadderConfig(base=da.TrainConfig(**BASE), methods="dfa", seeds=(5,))),
    ("saturation", ["--family", "resmlp", "--dataset", "mnist1d", "--extra", "0", "2"], "saturation",
     lambda: SaturationConfig(family="resmlp", dataset="mnist1d", extra=[0, 2])),
    ("grow", ["--family", "resmlp", "--dataset", "mnist1d", "--extra", "2"], "grow",
     lambda: GrowConfig(family="resmlp", dataset="mnist1d", extra=2)),
    ("intervene", [*BASE_FLAGS, "--penalty", "0.01"], "intervene",
     lambda: da.InterveneConfig(audit=da.AuditConfig(base=da.TrainConfig(**BASE, epochs=30), methods=["dfa"]),
                                lambdas=[0, 0.01])),
    ("intervene-grid", [*BASE_FLAGS, "--lambdas", "0", "0.1", "0"], "intervene",
     lambda: da.InterveneConfig(audit=da.AuditConfig(base=da.TrainConfig(**BASE, epochs=30), methods=["dfa"]),
                                lambdas=(0, 0.1))),
    ("probes", [*BASE_FLAGS, "--method", "fa:head=exact", "--alphas", "0", "1", "0", "--seeds", "4"], "probes",
     lambda: da.ProbesConfig(base=da.TrainConfig(**BASE).with_method("fa:head=exact"), alphas=[0, 1, 0],
                             seeds=[4])),
]


@pytest.mark.parametrize("cmd,flags,fn,python", SAME, ids=[s[0] for s in SAME])
def test_the_cli_and_python_build_the_same_resolved_config(cmd, flags, fn, python, monkeypatch, tmp_path):
    from_cli = _cli_config(monkeypatch, tmp_path, [cmd.split("-")[0], *flags], fn)
    from_python = python()
    print(cmd, from_python)
    assert from_cli == from_python
    assert getattr(from_python, "device", None) or from_python.base.device in ("cpu", "cuda:0")


def test_defaults_resolved_by_the_config_itself():
    """The effective defaults the CLI used to fill in: k-values 0..L, the dataset's budget, the device."""
    lc = da.LadderConfig(base=da.TrainConfig(num_blocks=2))
    assert lc.k_values == (0, 1, 2)  # was (0, 1, 2, 3, 4) from Python: refused as out of 0..2
    assert da.TrainConfig().device == ("cuda:0" if torch.cuda.is_available() else "cpu")  # was "cpu" always
    assert da.TrainConfig().epochs == 20 and da.TrainConfig(dataset="cifar10").epochs == 100
    assert SaturationConfig(family="resmlp", dataset="mnist1d").epochs == 20
    assert SaturationConfig(family="gpt").epochs == 20  # a text family: DEFAULT_EPOCHS
    acfg = da.AuditConfig(base=da.TrainConfig(), seeds=(9, 8, 9))
    assert acfg.seeds == (9, 8) and acfg.base.seed == 9 and acfg.methods == ("bp", "fa", "dfa")
    with pytest.raises(da.ConfigError, match="base config's seed 1 is not what this sweep trains"):  # (walk 15 W13:
        da.AuditConfig(base=da.TrainConfig(seed=1), seeds=(9, 8))  # it was replaced by 9 without a word)


REFUSED = [  # (CLI argv, the Python construction, the field named)
    (["audit", "--num-blocks", "0"], lambda: da.AuditConfig(base=da.TrainConfig(num_blocks=0)), "num_blocks"),
    (["audit", "--stop-on-flag", "--track-every", "2"],
     lambda: da.AuditConfig(base=da.TrainConfig(), stop_on_flag=True, track_every=2), "stop_on_flag"),
    (["audit", "--epochs", "0"], lambda: da.AuditConfig(base=da.TrainConfig(epochs=0)), "epochs"),
    (["audit", "--num-blocks", "2", "--shallow-baseline", "--shallow-blocks", "2"],
     lambda: da.AuditConfig(base=da.TrainConfig(num_blocks=2), shallow_blocks=2), "shallow_blocks"),
    (["ladder", "--num_blocks", "2", "--k_values", "0", "5"],
     lambda: da.LadderConfig(base=da.TrainConfig(num_blocks=2), k_values=(0, 5)), "k_values"),
    (["probes", "--method", "bp"], lambda: da.ProbesConfig(base=da.TrainConfig(method="bp")), "method"),
    (["ladder", "--epochs", "0"], lambda: da.LadderConfig(base=da.TrainConfig(epochs=0)), "epochs"),
    (["train", "--epochs", "20", "--stop-after", "30"], lambda: da.TrainConfig(epochs=20, stop_after=30),
     "stop_after"),
    (["train", "--train-blocks", "last:9"], lambda: da.TrainConfig(train_blocks="last:9"), "train_blocks"),
    (["grow", "--family", "resmlp", "--dataset", "mnist1d", "--extra", "2", "--insert-at", "50", "60"],
     lambda: GrowConfig(family="resmlp", dataset="mnist1d", extra=2, insert_at=(50, 60)), "insert_at"),
    (["grow", "--family", "resmlp", "--dataset", "mnist1d", "--epochs", "20", "--stop-after", "30"],
     lambda: GrowConfig(family="resmlp", dataset="mnist1d", epochs=20, stop_after=30), "stop_after"),
    (["saturation", "--family", "resmlp", "--dataset", "mnist1d", "--stop-after", "30"],
     lambda: SaturationConfig(family="resmlp", dataset="mnist1d", stop_after=30), "stop_after"),
    (["train", "--method", "fa:head=sideways"],
     lambda: da.TrainConfig(method="fa", method_options={"head": "sideways"}), "method_options"),
    (["train", "--method", "fa-stream:scale=-1"], lambda: da.TrainConfig().with_method("fa-stream:scale=-1"),
     "method_options"),
    (["audit", "--methods", "bp", "ep:beta=0"],
     lambda: da.AuditConfig(base=da.TrainConfig(), methods=["bp", "ep:beta=0"]), "methods"),
    (["train", "--warmup", "ep:beta=-1"], lambda: da.TrainConfig(warmup="ep:beta=-1"), "warmup"),
    (["intervene", "--penalty", "0.01", "--lambdas", "0", "1"],
     lambda: da.InterveneConfig(audit=da.AuditConfig(base=da.TrainConfig(), methods=["dfa"]), penalty=0.01,
                                lambdas=(0, 1)), "penalty"),
    (["intervene", "--scale-penalty", "0.1"],
     lambda: da.InterveneConfig(audit=da.AuditConfig(base=da.TrainConfig(scale_penalty=0.1), methods=["dfa"])),
     "scale_penalty"),
    (["intervene", "--cell", "0", "--list-cells"], lambda: da.SweepOptions(cell="0", list_cells=True), "cell"),
    (["intervene", "--jobs", "2", "--executor", "slurm"], lambda: da.SweepOptions(jobs=2, executor="slurm"), "jobs"),
]
if NO_CUDA:
    REFUSED += [(["train", "--device", "cuda"], lambda: da.TrainConfig(device="cuda"), "device"),
                (["saturation", "--device", "cuda"], lambda: SaturationConfig(device="cuda"), "device")]


@pytest.mark.parametrize("argv,python,field", REFUSED, ids=[" ".join(r[0]) for r in REFUSED])
def test_the_same_refusal_in_one_line_naming_the_callers_field(argv, python, field, tmp_path, capsys):
    out = tmp_path / "out"
    rc = main([*argv, "--out", str(out)])
    err = capsys.readouterr().err.strip()
    print(err)
    assert rc == 2 and len(err.splitlines()) == 1, err
    with pytest.raises(ConfigError) as exc:
        python()
    print(exc.value)
    assert exc.value.field == field
    assert err == f"depthaudit: error: {exc.value.for_cli()}"  # the same refusal, in the CLI's words
    assert "--" not in str(exc.value) and field in str(exc.value)  # Python's words: keywords, never flags
    assert not out.exists()  # nothing written


@pytest.mark.parametrize("value", ["8", 8.5, True, None])
def test_field_types_are_checked_where_the_config_is_built(value):
    with pytest.raises(ConfigError) as exc:
        da.TrainConfig(d_hidden=value)
    print(exc.value)
    assert exc.value.field == "d_hidden" and "must be an integer" in str(exc.value)


def test_ints_for_floats_and_lists_for_tuples_stored_as_the_cli_would():
    cfg = da.TrainConfig(lr=1, weight_decay=0)
    assert type(cfg.lr) is float and type(cfg.weight_decay) is float
    assert da.AuditConfig(base=da.TrainConfig(), seeds=[1, 2]).seeds == (1, 2)
    with pytest.raises(ConfigError, match="^seeds must be a tuple of integers"):
        da.AuditConfig(base=da.TrainConfig(), seeds=[1.5])


def test_empty_seeds_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match="^seeds ") as exc:
        da.identity(da.TrainConfig(num_blocks=1, d_hidden=8), seeds=[])
    print(exc.value)
    with pytest.raises(ConfigError, match="^seeds is empty"):
        da.AuditConfig(base=da.TrainConfig(), seeds=())


@pytest.mark.skipif(not NO_CUDA, reason="needs a machine without CUDA")
def test_cuda_without_cuda_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ConfigError, match=r"^device cuda: CUDA is not available here; use device=cpu"):
        da.audit(da.AuditConfig(base=da.TrainConfig(device="cuda", num_blocks=1)), tmp_path / "a")
    assert not (tmp_path / "a").exists()
    from depthaudit.config import nothing_trains

    with nothing_trains():  # listing or reporting runs trained on a GPU: accepted
        assert da.TrainConfig(device="cuda").device == "cuda:0"
    assert da.TrainConfig.from_dict({"device": "cuda:1"}).device == "cuda:1"  # a stored GPU run reads back


def test_data_errors_name_the_python_keyword_and_the_cli_flag(tmp_path, capsys):
    from depthaudit.data import load_data

    with pytest.raises(ConfigError) as exc:
        load_data("cifar10", str(tmp_path / "none"), False, torch.device("cpu"))
    print(exc.value)
    assert str(exc.value).startswith("data_dir ") and "download=True" in str(exc.value)
    assert exc.value.for_cli().startswith("--data-dir ") and exc.value.for_cli().endswith("use --download")


def test_a_method_option_is_checked_once_by_the_config(monkeypatch, tmp_path):
    """The spec's text is parsed at the edge; its values are checked once, where the run config resolves them."""
    from depthaudit.methods import build_method
    from depthaudit.methods.options import Option
    from depthaudit.models import build_model

    calls, check = [], Option.check
    monkeypatch.setattr(Option, "check", lambda self, v: calls.append(v) or check(self, v))
    cfg = _cli_config(monkeypatch, tmp_path, ["train", *BASE_FLAGS, "--method", "fa:head=exact"], "train")
    assert calls == ["exact"] and cfg.method_spec == "fa:head=exact" and cfg.method_spec.name == "fa"
    calls.clear()
    method = build_method(cfg.method, build_model("resmlp", (40,), 10, 8, 2, None, 0), cfg.seed, cfg=cfg)
    assert calls == [] and method.head == "exact"  # the resolved options are the config's: not checked again
