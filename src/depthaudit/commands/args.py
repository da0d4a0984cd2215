"""The commands' flag sets (generated from the config dataclasses by :mod:`.parser`) and the configs built from them.

The configs are built once here, from the flags given, and passed down (experiments vary method, seed and
blocks from them).
"""

# imports inside functions: torch-loading modules are imported inside functions: `depthaudit --help` loads no torch
import argparse
import sys
from contextlib import nullcontext
from contextvars import ContextVar
from dataclasses import fields, replace
from pathlib import Path

from ..config import TrainConfig, nothing_trains
from ..errors import UsageError
from ..io import foreign_json
from .parser import POS_INT, Parser, add_fields, field_default, fmt, given


def add_train_args(p: Parser, per_run: bool = True, training: bool = True, defaults: dict | None = None,
                   sweep=None) -> None:
    """The TrainConfig flags; ``per_run``: --method, --seed …, else the ``sweep`` config's --methods, --seeds."""
    from ..experiments.audit import AuditConfig

    skip = () if per_run else {f.name for f in fields(TrainConfig) if f.metadata.get("per_run")}
    add_fields(p, TrainConfig, skip=skip, defaults=defaults, training=training)
    if not per_run:
        add_fields(p, sweep or AuditConfig, only={"methods", "seeds"}, defaults=defaults, training=training)
    method_option_flags(p)


def method_option_flags(p: Parser) -> None:
    """One flag per declared method option (``--fa-head``, ``--ep-beta``, a plug-in's ``--mine-x``), generated.

    Each sets that option of every chosen method declaring it, unless a ``--methods`` entry sets it itself;
    its default is each method's own, its type, range and choices are the declaration's.
    """
    from ..methods.specs import option_flags

    g = p.group("method options (each method's own; also name:key=value in a method spec)")
    for f, (opt, owners) in option_flags().items():
        if "--" + f in p._option_string_actions:  # (argparse's own table) a plug-in's name + option = one of ours
            raise UsageError(f"method {owners[0]!r}{_where(owners[0])} declares the option whose flag would be --{f}, "
                             f"which is already depthaudit's own flag; rename that option (or the method)")
        d = ("yes" if opt.default else "no") if opt.type is bool else fmt(opt.default)
        help_text = f"{', '.join(owners)}: {opt.help} ({opt.describe()}; default: {d})".replace("%", "%%")
        if opt.type is bool:  # `--fa-stream-identity` alone is yes; `… yes`/`… no` as its help says
            g.add_argument("--" + f, dest=f.replace("-", "_"), nargs="?", const=True, type=_option_type(opt),
                           help=help_text, advanced=True, metavar="yes|no")
        else:
            g.add_argument("--" + f, dest=f.replace("-", "_"), type=_option_type(opt), help=help_text, advanced=True,
                           metavar="X" if opt.type is float else "N" if opt.type is int else
                           "|".join(opt.choices or ("S",)))


def _where(method: str) -> str:
    """`` (file.py)``: where a registered method's class is defined, for a message about it."""
    import inspect

    from ..methods import METHODS

    try:
        return f" ({Path(inspect.getsourcefile(METHODS.get(method))).name})"
    except (TypeError, OSError):
        return ""


def _option_type(opt):
    def conv(text: str):
        try:
            return opt.check(opt.parse(text))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{exc}{opt.hint(exc)}") from None

    conv.__name__ = opt.type.__name__
    return conv


def method_flag_values(a: argparse.Namespace) -> dict:
    """``{flag: value}`` of the method-option flags the user gave."""
    from ..methods.specs import option_flags

    return {f: getattr(a, f.replace("-", "_")) for f in option_flags()
            if getattr(a, f.replace("-", "_"), None) is not None}


def audit_args(ap: Parser, out_default: str, defaults: dict | None = None) -> None:
    """The training flags plus the audit's measurement and threshold flags, ``--out`` and the sweep's flags."""
    from ..experiments.audit import AuditConfig

    add_train_args(ap, per_run=False, defaults=defaults)
    add_fields(ap, AuditConfig, skip={"methods", "seeds"})
    shallow_args(ap.group("measurement and thresholds"))
    out_arg(ap, out_default)
    sweep_args(ap)


def shallow_args(g) -> None:
    """``--shallow-baseline [--shallow-blocks K]`` (audit and ladder; experiments/shallow.py)."""
    g.add_argument("--shallow-baseline", action="store_true",
                   help="also train a parameter-matched model with fewer blocks (ours: depth or capacity?)")
    g.add_argument("--shallow-blocks", type=POS_INT, default=None, metavar="K", advanced=True,
                   help="blocks of the shallow baseline; its width matches the parameters (default: 1)")


def shallow_blocks(a: argparse.Namespace) -> int:
    """Blocks of the parameter-matched shallow baseline, 0 when not asked for (the config checks 1 <= K < L)."""
    if not a.shallow_baseline:
        if a.shallow_blocks is not None:
            _note("--shallow-blocks has no effect without --shallow-baseline")
        return 0
    return 1 if a.shallow_blocks is None else a.shallow_blocks


def sweep_args(p: Parser, stacking: bool = True) -> None:
    """Where and how a sweep's runs train (:class:`~depthaudit.executors.SweepOptions`' declared fields)."""
    from ..executors import SweepOptions

    add_fields(p, SweepOptions, skip=() if stacking else {"batch_runs"})


# set while `report` reruns a --cell sweep's kept command with --stored-only: its execution flags (--jobs 2) were
# the cells' own, not given to report, so their "no effect" note would name flags the user never gave here
# (walk 36 case 107)
ASSEMBLING: ContextVar[bool] = ContextVar("ASSEMBLING", default=False)


def sweep_options(a: argparse.Namespace, out, device: str):
    """The frozen SweepOptions from the sweep flags (the local executor's flags noted when they do nothing)."""
    from ..sweep import SweepOptions, batch_cap

    executor = a.executor or "local"  # the rules are SweepOptions' own; the notes below only say what is ignored
    if executor == "local" and any(x is not None for x in (a.gpus_per_run, a.cpus_per_run, a.ray_address)):
        _note("--cpus-per-run, --gpus-per-run and --ray-address are for --executor ray (or slurm); ignored here")
    if executor == "slurm" and (a.gpus_per_run is not None or a.ray_address):
        _note("--gpus-per-run and --ray-address are for --executor ray; ignored here")
    if executor != "slurm" and (a.slurm_partition or a.slurm_gpus is not None):
        _note("--slurm-* flags are for --executor slurm; ignored here")
    if getattr(a, "cell", None) is not None and (getattr(a, "jobs", None) or 1) > 1:
        _note("--jobs has no effect with --cell: one cell runs in this process")
    elif not trains(a) and not ASSEMBLING.get():  # how runs would train (walk 24 c. 110, 25 W5)
        idle = [f"--{f.replace('_', '-')}" for f in SweepOptions.TRAINS
                if getattr(a, f, None) not in (None, (), [], SweepOptions.__dataclass_fields__[f].default)]
        if idle:
            _note(f"{', '.join(idle)} {'has' if len(idle) == 1 else 'have'} no effect with "
                  f"--{'stored-only' if getattr(a, 'stored_only', False) else 'list-cells'}: nothing trains")
    if getattr(a, "log_dir", None) and not getattr(a, "log", None):  # (walk 20 W4: ignored without a word)
        _note("--log-dir has no effect without --log (tensorboard, wandb): no live log is written")
    opts = given(a, SweepOptions)
    opts.update(batch_runs=batch_cap(getattr(a, "batch_runs", 1), device),
                log_dir=a.log_dir or str(Path(out) / "logs"))
    return SweepOptions(**opts)


def stopped(status) -> int:
    """A sweep that did what was asked and no more (``--list-cells``, ``--cell``): its message, exit 0."""
    print(status.stopped)
    return 0


def remember_sweep(opts, out, argv: list[str]):
    """``opts`` that keep a cell's command in ``OUT/sweep.json`` for ``depthaudit report OUT``.

    The sweep writes it once the cell is known to exist, so a bad ``--cell`` leaves nothing behind; a user's own
    ``sweep.json`` there is refused here, before the folder is claimed (nothing written).
    """
    if foreign_json(Path(out) / "sweep.json"):  # (checked again where it is written, for the Python API)
        raise UsageError(f"{Path(out) / 'sweep.json'} exists and is not depthaudit's (a --cell run keeps its command "
                         "there); move it away or choose another --out")
    keep, skip = [], False
    for tok in argv:
        if skip:
            skip = False
            continue
        if tok in ("--cell", "--list-cells", "--stored-only"):
            skip = tok == "--cell"
            continue
        if not tok.startswith("--cell="):
            keep.append(tok)
    return replace(opts, remember=(str(out), tuple(keep)))


def out_arg(p, default, help_text: str = "output folder", shown: str = "--out", dest: str = "out") -> None:
    """The output folder flag: one spelling in the help, every spelling accepted.

    ``--out`` and the seed harness's ``--output_dir`` / ``--output-dir`` all set the same destination, so a
    command line written for either works with every command.
    """
    spellings = ["--out", "--output_dir", "--output-dir"]
    p.add_argument(shown, dest=dest, default=default, help=help_text)
    p.add_argument(*[s for s in spellings if s != shown], dest=dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def out_spelling(argv: list[str], shown: str = "--out") -> str:
    """The output flag as the user typed it in ``argv`` (``--out`` for a ladder), else the help's ``shown``."""
    for t in argv:
        flag = t.split("=", 1)[0]
        if flag in ("--out", "--output_dir", "--output-dir"):
            return flag
    return shown


def probe_sizes(a: argparse.Namespace, cls) -> tuple[int, int]:
    """``(probe batches, probe batch size)``: given, else ``cls``' declared defaults."""
    return (a.probe_batches or field_default(cls, "probe_batches"),
            a.probe_batch_size or field_default(cls, "probe_batch_size"))


def trains(a: argparse.Namespace) -> bool:
    """Whether the command trains.

    ``--stored-only``, ``--list-cells``: nothing runs, so ``--device cuda`` is accepted on a machine without it
    (:func:`depthaudit.config.nothing_trains`).
    """
    return not (getattr(a, "stored_only", False) or getattr(a, "list_cells", False))


def building(a: argparse.Namespace):
    """The context a command's configs are built in: :func:`~depthaudit.config.nothing_trains` when nothing trains."""
    return nullcontext() if trains(a) else nothing_trains()


def config_from_args(a: argparse.Namespace, zero_epochs: bool = False) -> TrainConfig:
    """The frozen config, built once here from the flags given (the dataclass fills in every other default).

    ``zero_epochs``: ``--epochs 0`` is meaningful (``train``: record the initial or warm-start weights), said so.
    """
    if a.epochs == 0 and zero_epochs:  # (the sweeps' configs refuse 0: AuditConfig, LadderConfig)
        _note("--epochs 0: nothing is trained; the record and checkpoint hold the initial (or --warm-start) weights")
    from ..data.base import generated
    from ..methods import parse_spec, with_flags

    if (getattr(a, "data_dir", None) or getattr(a, "download", False)) and generated(a.dataset):
        _note(f"--{'data-dir' if a.data_dir else 'download'} has no effect with --dataset {a.dataset}: it is "
              "generated here, not read")
    flags = method_flag_values(a)
    unused_option_note(a, flags)
    for flag, f, d in (("--penalty-form", "penalty_form", "abs"), ("--penalty-reduction", "penalty_reduction",
                                                                   "example")):
        if getattr(a, f, None) not in (None, d) and not getattr(a, "scale_penalty", None) \
                and not getattr(a, "lambdas", None) and not getattr(a, "penalty", None):
            _note(f"{flag} {getattr(a, f)} has no effect without a penalty (--scale-penalty > 0)")
    kw = given(a, TrainConfig)
    if not kw.get("scale_penalty"):  # no penalty, no form: noted above (intervene takes the grid's from its own flags)
        kw.pop("penalty_form", None)
        kw.pop("penalty_reduction", None)
    if "warmup_fraction" in kw and not kw.get("warmup"):
        _note("--warmup-fraction has no effect without --warmup (the method to warm up under)")
    elif kw.get("warmup") and kw.get("warmup_fraction") == 0:
        with building(a):  # an unknown or bad warm-up method is refused as Python's TrainConfig refuses it, even
            TrainConfig(**{**kw, "warmup_fraction": 0.2})  # where no step would be under it (walk 26 case 120)
        _note(f"--warmup {kw['warmup']} has no effect with --warmup-fraction 0: no step is under it")
        kw.pop("warmup")  # no warm-up: the same run as without the flags (TrainConfig stores it so)
        kw.pop("warmup_fraction")
    elif kw.get("warmup") and kw.get("warmup_fraction") == 1:
        _note(f"--warmup-fraction 1: every step is under --warmup {kw['warmup']}; the method itself never trains")
    if kw.get("warmup"):  # named by its flag (walk 33 W2: "unknown method '5'" for --warmup 5 named no flag)
        try:
            parse_spec(kw["warmup"])
        except UsageError as exc:
            raise UsageError(f"--warmup {kw['warmup']!r}: {exc}") from None  # (as the config words it)
    if kw.get("warmup") and hasattr(a, "method") and str(parse_spec(kw["warmup"])) == str(
            parse_spec(a.method or TrainConfig.method)):  # (the default method too: --warmup bp alone)
        _note(f"--warmup {kw['warmup']} is the method itself: the warm-up changes nothing")
    if getattr(a, "methods", None):  # parsed once, here: each entry a MethodSpec (its canonical label)
        labels = [with_flags(parse_spec(m), flags) for m in a.methods]
        dedup_note(labels, "--methods")  # `fa` and `fa:` are one row: said once, counted once
        a.methods = list(dict.fromkeys(labels))
    if getattr(a, "method", None):
        a.method_spec = with_flags(parse_spec(a.method), flags)
        kw.update(method=a.method_spec.name, method_options=dict(a.method_spec.given))
        a.method = a.method_spec.name
    if getattr(a, "credit_mix", None) is not None and (getattr(a, "method", None) or "bp") == "bp":
        _note("--credit-mix has no effect with --method bp: BP's credit mixed toward BP is BP's")
    elif getattr(a, "credit_mix", None) == 0:
        _note("--credit-mix 0 has no effect: (1 - 0)·method + 0·BP is the method's own credit")
    if getattr(a, "seeds", None):
        kw["seed"] = a.seeds[0]
    with building(a):  # each --methods row's options: checked by the sweep's config (experiments/resolve.py)
        cfg = TrainConfig(**kw)
    whole_budget_note(kw.get("stop_after"), cfg)
    return cfg


def whole_budget_note(stop_after, cfg) -> None:
    """``--stop-after`` at the whole budget stops nothing: said (the config stores no stop: the same run)."""
    if stop_after is not None and cfg.stop_after is None:
        _note(f"--stop-after {stop_after} is the whole budget (--epochs {cfg.epochs}): every epoch is trained")


def unused_option_note(a: argparse.Namespace, flags: dict) -> None:
    """A method-option flag that none of the chosen methods declares: say so on stderr (it has no effect)."""
    from ..methods.specs import option_flags

    names = [getattr(a, "method", None)] if getattr(a, "method", None) else list(getattr(a, "methods", []) or [])
    chosen = {str(n).partition(":")[0] for n in names}
    owners = option_flags()
    if not names:  # no --method/--methods given: the command's default ones are the chosen
        from ..config import TrainConfig
        from ..experiments.audit import AuditConfig

        names = ([TrainConfig.__dataclass_fields__["method"].default] if hasattr(a, "method")
                 else list(AuditConfig.__dataclass_fields__["methods"].default))
        chosen = set(names)
    for f in flags:
        if not chosen & set(owners[f][1]):
            _note(f"--{f} is an option of {', '.join(owners[f][1])}; none of {', '.join(names)} reads it")
        elif rows := _rows_setting(names, f, owners[f][1]):  # every row that reads it sets the option itself
            _note(f"--{f} {flags[f]} has no effect: {', '.join(rows)} set{'s' if len(rows) == 1 else ''} it in "
                  "the row itself, and a row's own option wins")


def _rows_setting(names: list, flag: str, owners: list[str]) -> list[str]:
    """The rows among ``names`` that read ``flag`` — if each of them sets its option itself (else ``[]``)."""
    from ..methods import METHODS, parse_spec
    from ..methods.specs import declared, flag_name

    rows = []
    for n in names:
        try:
            ms = parse_spec(str(n))
        except Exception:  # a bad row is refused, with its own line, when the config is built
            return []
        if ms.name not in owners:
            continue
        keys = [k for k, opt in declared(METHODS.get(ms.name)).items() if flag_name(ms.name, k, opt) == flag]
        if not all(k in dict(ms.given) for k in keys):
            return []
        rows.append(str(n))
    return list(dict.fromkeys(rows))


def _note(text: str) -> None:
    print(f"depthaudit: note: {text}", file=sys.stderr)


def dedup_note(values: list, flag_name: str) -> None:
    """Repeated values count once (a seed twice would double-count it in mean ± std); say so on stderr."""
    dups = sorted({str(v) for v in values if values.count(v) > 1})
    if dups:
        _note(f"{flag_name} repeats {', '.join(dups)}; each value counts once")
