"""Flags shared by the commands, and the frozen config built from them (once, here, then passed down)."""

import argparse
import functools
import math
from pathlib import Path

from ..config import TrainConfig
from ..errors import UsageError


@functools.cache
def _defaults() -> TrainConfig:
    """The config defaults (built on first use: building validates against the registries, which import torch)."""
    return TrainConfig()



def number(kind, lo=None, hi=None, lo_open: bool = False, what: str | None = None):
    """An argparse ``type``: parse ``kind``, refuse non-finite values and values outside ``[lo, hi]``."""

    def conv(text: str):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        if kind is float and not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if lo is not None and (v <= lo if lo_open else v < lo):
            raise argparse.ArgumentTypeError(f"{text} must be {'>' if lo_open else '>='} {lo}{what or ''}")
        if hi is not None and v > hi:
            raise argparse.ArgumentTypeError(f"{text} must be <= {hi}{what or ''}")
        return v

    conv.__name__ = kind.__name__
    return conv


POS_INT, NONNEG_INT, POS_FLOAT, NONNEG_FLOAT = number(int, 1), number(int, 0), number(float, 0, lo_open=True), \
    number(float, 0)
# the valid range of every numeric flag, by destination: one table, applied by Parser.add_argument
RANGES = {
    "lr": POS_FLOAT, "weight_decay": NONNEG_FLOAT, "scale_penalty": NONNEG_FLOAT, "batch_size": POS_INT,
    "epochs": NONNEG_INT, "stop_after": POS_INT, "d_hidden": POS_INT, "num_blocks": NONNEG_INT, "mlp_ratio": POS_INT,
    "seed": number(int, 0, 2**63 - 1), "seeds": number(int, 0, 2**63 - 1), "jobs": POS_INT, "batch_runs": POS_INT,
    "shallow_blocks": POS_INT,
    "cpus_per_run": POS_FLOAT, "gpus_per_run": NONNEG_FLOAT, "slurm_time": POS_INT, "slurm_gpus": NONNEG_INT,
    "slurm_parallelism": POS_INT,
    "track_every": NONNEG_INT, "probe_batches": POS_INT, "probe_batch_size": number(int, 2),
    "fresh_b_draws": NONNEG_INT, "rho_max": POS_FLOAT, "eps": POS_FLOAT, "ref_factor": POS_FLOAT,
    "gap_min": number(float), "lambdas": NONNEG_FLOAT,
    "penalty": NONNEG_FLOAT, "alphas": number(float, 0, 1), "pre_epochs": NONNEG_INT, "k_values": NONNEG_INT,
    "gpu": NONNEG_INT, "context": POS_INT, "base_blocks": POS_INT, "extra": NONNEG_INT, "analysis_batches": POS_INT,
    "low_signal": POS_FLOAT, "alpha": POS_FLOAT, "insert_at": POS_INT, "continue_steps": NONNEG_INT,
    "delta": NONNEG_FLOAT, "margin": NONNEG_FLOAT, "base_width": POS_INT,
    "continue_lr": POS_FLOAT,
}


# shown by --help-all only: method options, model variants, the cluster executors' resources, live-log folders
ADVANCED = {"variant", "bootstrap", "grow_lr", "grow_train",
            "mlp_ratio", "download", "augment", "stop_after", "penalty_form",
            "ray_address", "cpus_per_run", "gpus_per_run", "slurm_partition", "slurm_time", "slurm_gpus",
            "slurm_parallelism", "log_dir", "d1_stat", "ref_factor", "fresh_b_draws", "verbose", "replace_report",
            "continue_lr", "shallow_blocks", "batch_runs", "warm_start", "credit_mix", "no_checkpoint"}


class _HelpAll(argparse.Action):
    """``--help-all``: the full help, every flag."""

    def __call__(self, parser, namespace, values, option_string=None):
        parser._show_all = True
        parser.print_help()
        parser.exit()


class _Formatter(argparse.HelpFormatter):
    """Compact help; a list default prints as ``42 123 456`` (what one types), read when the help is shown.

    A flag's ``--multi_word`` spelling is accepted but not listed (one line per flag; the README says so).
    """

    def __init__(self, prog):
        super().__init__(prog, max_help_position=30, width=100)

    def _format_action_invocation(self, action):
        shown = [s for s in action.option_strings if not (s.startswith("--") and "_" in s
                                                             and s.replace("_", "-") in action.option_strings)]
        if shown and shown != action.option_strings:
            import copy

            action = copy.copy(action)
            action.option_strings = shown
        return super()._format_action_invocation(action)

    def _expand_help(self, action):
        if isinstance(action.default, (list, tuple)):
            import copy

            action = copy.copy(action)
            action.default = " ".join(map(str, action.default))
        return super()._expand_help(action)


class Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line (exit 2), not a usage dump; compact help."""

    def __init__(self, *args, **kw):
        kw.setdefault("formatter_class", _Formatter)
        sub = kw.get("prog", "").count(" ")
        if sub:  # subcommands: the groups below say it all
            kw.setdefault("usage", "%(prog)s [options]")
        super().__init__(*args, **kw)
        if sub:
            self._show_all = False
            super().add_argument("--help-all", action=_HelpAll, nargs=0, help="show every flag, advanced ones too")

    def add_argument(self, *names, **kw):
        """Every ``--multi-word`` flag also takes ``--multi_word``; numeric flags get their range from RANGES."""
        return _add(super().add_argument, names, kw)

    def add_argument_group(self, *args, **kw):
        """Groups apply the same rules as the parser."""
        g = super().add_argument_group(*args, **kw)
        orig = g.add_argument
        g.add_argument = lambda *names, **k: _add(orig, names, k)
        return g

    def format_help(self) -> str:
        """The help; a subcommand's advanced flags (:data:`ADVANCED`) only with ``--help-all``."""
        hidden = [] if getattr(self, "_show_all", True) else [
            a for a in self._actions if (a.dest in ADVANCED or a.dest in _option_dests())
            and a.help is not argparse.SUPPRESS]
        saved = [a.help for a in hidden]
        for a in hidden:
            a.help = argparse.SUPPRESS
        try:
            text = super().format_help()
        finally:
            for a, h in zip(hidden, saved, strict=True):
                a.help = h
        if hidden:
            text += f"\n{len(hidden)} more flags (method options, variants, cluster resources): --help-all\n"
        return text

    def error(self, message):
        """One line naming the problem, exit 2."""
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _add(add, names, kw):
    names = list(names)
    for n in list(names):
        alt = "--" + n[2:].replace("-", "_")
        taken = getattr(getattr(add, "__self__", None), "_option_string_actions", {})
        if n.startswith("--") and alt not in names and alt not in taken:
            names.append(alt)
    dest = kw.get("dest") or next((n[2:].replace("-", "_") for n in names if n.startswith("--")),
                                  names[0] if names and not names[0].startswith("-") else None)
    if kw.get("type") in (int, float):
        kw["type"] = RANGES.get(dest, number(kw["type"]))
    elif dest in PATHS and kw.get("type") is None and kw.get("action") in (None, "store"):
        kw["type"] = path_text
    return add(*names, **kw)


# the flags that name a file or folder: an empty value (`--out ""`, an unset shell variable) is refused, not
# read as "the default", and a NUL byte (which no path may hold) is refused before any file function sees it
PATHS = {"out", "output_dir", "data_dir", "warm_start", "text", "audit_dir", "log_dir", "slurm_folder", "model", "dirs",
         "dir", "path"}


def path_text(text: str) -> str:
    """A path flag's value: refused when empty (or blank) or when it holds a NUL byte."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path; give a path, or drop the flag for its default")
    if "\0" in text:
        raise argparse.ArgumentTypeError(f"{text!r} holds a NUL byte, which no path can hold")
    return text


def flag(group, name: str, **kw):
    """Add ``--name-with-dashes`` and its ``--name_with_underscores`` spelling (the seed harness's)."""
    dashed = "--" + name.replace("_", "-")
    spellings = [dashed] if "_" not in name else [dashed, "--" + name]
    d = kw.get("default")
    if "default" in kw and "help" in kw and d is not None and d is not False:
        kw["help"] += " (default: %(default)s)"  # read when shown: a command's set_defaults is what it says
    if kw.get("type") in (int, float) and "metavar" not in kw:
        kw["metavar"] = "N" if kw["type"] is int else "X"
    group.add_argument(*spellings, dest=name, **kw)


def add_train_args(p: argparse.ArgumentParser, per_run: bool = True) -> None:
    """Flags shared by every command that trains (``per_run``: also --method, --train-blocks, --seed)."""
    from ..data import DATASETS
    from ..data.augment import AUGMENTS
    from ..methods import METHODS
    from ..models import MODELS
    from ..models.resmlp import VARIANTS

    g = p.add_argument_group("data")
    flag(g, "dataset", default=_defaults().dataset, choices=DATASETS.names(), help="dataset")
    flag(g, "data_dir", default=None, metavar="DIR", help="folder or .zip holding the data (cifar*)")
    flag(g, "download", action="store_true", help="download a missing CIFAR archive (verified by md5)")
    flag(g, "augment", default="auto", choices=["auto", *AUGMENTS],
          help="training augmentation; auto = the dataset's (CIFAR: crop+flip, pad 4)")
    g = p.add_argument_group("model")
    flag(g, "arch", default=_defaults().arch, choices=MODELS.names(), help="residual model")
    flag(g, "variant", default=_defaults().variant, choices=VARIANTS,
          help="ref = the published protocol's model; v0.1 = depthaudit 0.1's (ours)")
    flag(g, "d_hidden", type=int, default=_defaults().d_hidden, help="stream width d")
    flag(g, "num_blocks", type=int, default=_defaults().num_blocks, help="residual blocks L")
    flag(g, "mlp_ratio", type=int, default=None, help="MLP expansion (default: the variant's; ResMLP ref 1)")
    g = p.add_argument_group("credit and recipe")
    if per_run:
        flag(g, "method", default=_defaults().method, metavar="M",
             help=f"credit method, from {{{','.join(METHODS.names())}}}, with options as name:key=value")
        flag(g, "train_blocks", default=_defaults().train_blocks, help="all | none | last:k | first:k")
        flag(g, "credit_mix", type=float, default=None, help="credit mix (ours): (1-α)·method + α·BP credit")
        flag(g, "warm_start", default=None, metavar="PT", help="BP warm start (ours): start from these weights")
    else:
        flag(g, "methods", nargs="+", default=["bp", "fa", "dfa"], metavar="M",
              help=f"credit methods, from {{{','.join(METHODS.names())}}}; a variant as a row of its own: "
              "name:key=value (e.g. fa:head=exact, fa-stream:identity)")
        flag(g, "seeds", nargs="+", type=int, default=[42], metavar="S", help="seeds (mean ± std, ddof 1)")
    method_option_flags(p)
    flag(g, "epochs", type=int, default=None,
          help="budget: the cosine schedule spans it (default: the dataset's; CIFAR 100, others 20)")
    flag(g, "stop_after", type=int, default=None, help="train only the first N epochs of that schedule")
    flag(g, "batch_size", type=int, default=_defaults().batch_size, help="batch size")
    flag(g, "lr", type=float, default=_defaults().lr, help="AdamW learning rate (cosine to 0)")
    flag(g, "weight_decay", type=float, default=_defaults().weight_decay, help="AdamW weight decay")
    flag(g, "scale_penalty", type=float, default=_defaults().scale_penalty, help="scale penalty λ")
    flag(g, "penalty_form", default=_defaults().penalty_form, choices=["abs", "rel"],
          help="abs = λ‖f‖² (reference) | rel = λ‖f‖²/‖h‖² (ours)")
    if per_run:
        flag(g, "seed", type=int, default=_defaults().seed, help="seed (init, feedback, shuffle)")
    flag(g, "device", default="auto", metavar="DEV", help="cpu | cuda | cuda:N | auto = cuda if available")


def _option_dests() -> set[str]:
    """The destinations of the generated method-option flags (shown by ``--help-all`` only)."""
    from ..methods.specs import option_flags

    return {f.replace("-", "_") for f in option_flags()}


def method_option_flags(p: argparse.ArgumentParser) -> None:
    """One flag per declared method option (``--fa-head``, ``--ep-beta``, a plug-in's ``--mine-x``), generated.

    Each sets that option of every chosen method declaring it, unless a ``--methods`` entry sets it itself;
    its default is each method's own (``None`` here), its type, range and choices are the declaration's.
    """
    from ..methods.specs import option_flags

    g = p.add_argument_group("method options (each method's own; also name:key=value in a method spec)")
    for f, (opt, owners) in option_flags().items():
        help_text = f"{', '.join(owners)}: {opt.help} ({opt.describe()}; default: {_fmt_default(opt.default)})"
        if opt.type is bool:
            flag(g, f.replace("-", "_"), action="store_const", const=True, default=None, help=help_text)
            continue
        flag(g, f.replace("-", "_"), type=_option_type(opt), default=None, help=help_text,
             metavar="X" if opt.type is float else "N" if opt.type is int else "|".join(opt.choices or ("S",)))


def _fmt_default(v) -> str:
    return ("yes" if v else "no") if isinstance(v, bool) else f"{v:g}" if isinstance(v, float) else str(v)


def _option_type(opt):
    def conv(text: str):
        try:
            return opt.check(opt.parse(text))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{exc} ({opt.describe()})") from None

    conv.__name__ = opt.type.__name__
    return conv


def method_flag_values(a: argparse.Namespace) -> dict:
    """``{flag: value}`` of the method-option flags the user gave."""
    from ..methods.specs import option_flags

    return {f: getattr(a, f.replace("-", "_")) for f in option_flags()
            if getattr(a, f.replace("-", "_"), None) is not None}


def audit_args(ap: argparse.ArgumentParser, out_default: str) -> None:
    """The training flags plus the audit's measurement and threshold flags, ``--out`` and ``--jobs``."""
    add_train_args(ap, per_run=False)
    g = ap.add_argument_group("measurement and thresholds")
    probe_args(g)
    g.add_argument("--track-every", "--track_every", dest="track_every", type=int, default=1, metavar="N",
                   help="measure every N epochs; 0 = end only (default: %(default)s)")
    g.add_argument("--d1-stat", choices=["median", "mean"], default="median",
                   help="per-example stream norm statistic for D1 (default: median, the reference's)")
    g.add_argument("--stop-on-flag", action="store_true",
                   help="end a trained run at the epoch D1 or D2 first fires (status stopped_flagged)")
    g.add_argument("--functional", action="store_true",
                   help="also measure perturbation correlation, nudging and the fresh-B null at the end")
    g.add_argument("--fresh-b-draws", type=int, default=None, metavar="N",
                   help="with --functional: fresh feedback draws of the null (default: 20; 0 = skip)")
    g.add_argument("--rho-max", type=float, default=50.0, metavar="X", help="D1 flag when ρ > X (default: 50)")
    g.add_argument("--eps", type=float, default=1e-8, metavar="X", help="cosine floor ε (default: 1e-8)")
    g.add_argument("--ref-factor", type=float, default=10.0, metavar="X",
                   help="D2 flag when ‖g_L‖ < X·ε (default: 10)")
    g.add_argument("--gap-min", type=float, default=2.0, metavar="X", help="D3 flag when gap < X pp (default: 2)")
    shallow_args(g)
    out_arg(ap, out_default)
    sweep_args(ap)


def shallow_args(g) -> None:
    """``--shallow-baseline [--shallow-blocks K]`` (audit and ladder; experiments/shallow.py)."""
    g.add_argument("--shallow-baseline", action="store_true",
                   help="also train a parameter-matched model with fewer blocks (ours: depth or capacity?)")
    g.add_argument("--shallow-blocks", type=int, default=None, metavar="K",
                   help="blocks of the shallow baseline; its width matches the parameters (default: 1)")


def shallow_blocks(a: argparse.Namespace, num_blocks: int) -> int:
    """Blocks of the parameter-matched shallow baseline, 0 when not asked for; 1 <= K < L is checked here."""
    if not a.shallow_baseline:
        if a.shallow_blocks is not None:
            _note("--shallow-blocks has no effect without --shallow-baseline")
        return 0
    a.shallow_blocks = 1 if a.shallow_blocks is None else a.shallow_blocks
    if not 1 <= a.shallow_blocks < num_blocks:
        raise UsageError(f"--shallow-blocks {a.shallow_blocks}: the shallow baseline needs 1 <= blocks < "
                         f"--num-blocks {num_blocks}")
    return a.shallow_blocks


def hide_flags(p: argparse.ArgumentParser, dests: set[str]) -> None:
    """Keep flags that do not affect this command accepted (shared configs) but out of its ``--help``."""
    for action in p._actions:
        if action.dest in dests:
            action.help = argparse.SUPPRESS


# the flags of training alone: a command that never trains (identity) or trains one method (probes) hides them
TRAINING_ONLY = {"methods", "epochs", "stop_after", "batch_size", "lr", "weight_decay",
                 "scale_penalty", "penalty_form", "augment"}


def sweep_args(p, stacking: bool = True) -> None:
    """Where and how a sweep's runs train (SweepOptions): local processes, stacked runs, Ray, SLURM, cells, logs."""
    g = p.add_argument_group("sweep execution (README: on a cluster)")
    g.add_argument("--jobs", type=int, default=1, metavar="N", help="parallel local training processes (default: 1)")
    if stacking:
        g.add_argument("--batch-runs", type=int, default=None, metavar="N",
                       help="train up to N runs of one shape stacked in one process; 1 = one by one "
                       "(default: 16 on CUDA, 1 on CPU)")
    g.add_argument("--executor", choices=["local", "ray", "slurm"], default="local",
                   help="local processes, Ray tasks or a SLURM array via submitit (default: local)")
    g.add_argument("--list-cells", action="store_true", help="print the grid, one run per line (id, status), and stop")
    g.add_argument("--cell", default=None, metavar="ID", help="run only this cell (its id or index, e.g. "
                   "$SLURM_ARRAY_TASK_ID); a finished cell is skipped")
    g.add_argument("--log", nargs="+", choices=["tensorboard", "wandb"], default=[], metavar="TO",
                   help="also log every run live to tensorboard and/or wandb")
    g.add_argument("--log-dir", default=None, metavar="DIR", help="TensorBoard/W&B files (default: OUT/logs)")
    g.add_argument("--ray-address", default=None, metavar="ADDR", help="join this Ray cluster (default: "
                   "$RAY_ADDRESS, else start a local one)")
    g.add_argument("--cpus-per-run", type=float, default=1.0, metavar="X", help="Ray/SLURM CPUs per task (default: 1)")
    g.add_argument("--gpus-per-run", type=float, default=0.0, metavar="X", help="Ray GPUs per task, may be "
                   "fractional (default: 0)")
    g.add_argument("--slurm-partition", default=None, metavar="P", help="SLURM partition")
    g.add_argument("--slurm-time", type=int, default=240, metavar="MIN", help="SLURM minutes per task (default: 240)")
    g.add_argument("--slurm-gpus", type=int, default=0, metavar="N", help="SLURM GPUs per task (default: 0)")
    g.add_argument("--slurm-parallelism", type=int, default=64, metavar="N",
                   help="SLURM array tasks at once (default: 64)")
    g.add_argument("--slurm-cluster", default=None, help=argparse.SUPPRESS)  # submitit's "local" (tests)
    g.add_argument("--stored-only", action="store_true", help=argparse.SUPPRESS)  # report of finished cells


def sweep_options(a: argparse.Namespace, out, device: str):
    """The frozen SweepOptions from the sweep flags; records ``argv`` for ``depthaudit report`` of cells."""
    from ..sweep import SweepOptions, batch_cap

    if a.cell is not None and a.list_cells:
        raise UsageError("--cell and --list-cells exclude each other; list first, then run one cell")
    if a.jobs > 1 and a.executor != "local":
        raise UsageError(f"--jobs is for the local executor; with --executor {a.executor} every cell is its own task")
    if a.executor == "local" and (a.gpus_per_run or a.cpus_per_run != 1.0 or a.ray_address):
        _note("--cpus-per-run, --gpus-per-run and --ray-address are for --executor ray (or slurm); ignored here")
    if a.executor == "slurm" and (a.gpus_per_run or a.ray_address):
        _note("--gpus-per-run and --ray-address are for --executor ray; ignored here")
    if a.executor != "slurm" and (a.slurm_partition or a.slurm_gpus):
        _note("--slurm-* flags are for --executor slurm; ignored here")
    batch = batch_cap(getattr(a, "batch_runs", 1), device)
    return SweepOptions(jobs=a.jobs, batch_runs=batch, executor=a.executor, cell=a.cell, list_cells=a.list_cells,
                        stored_only=a.stored_only, log=tuple(dict.fromkeys(a.log)),
                        log_dir=a.log_dir or str(Path(out) / "logs"), ray_address=a.ray_address,
                        cpus_per_run=a.cpus_per_run, gpus_per_run=a.gpus_per_run,
                        slurm_partition=a.slurm_partition, slurm_time=a.slurm_time, slurm_gpus=a.slurm_gpus,
                        slurm_parallelism=a.slurm_parallelism, slurm_cluster=a.slurm_cluster)


def remember_sweep(opts, out, argv: list[str]):
    """``opts`` that keep a cell's command in ``OUT/sweep.json`` for ``depthaudit report OUT``.

    The sweep writes it once the cell is known to exist, so a bad ``--cell`` leaves nothing behind.
    """
    from dataclasses import replace

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
    suffix = " (default: %(default)s)" if default is not None else ""
    p.add_argument(shown, dest=dest, default=default, help=help_text + suffix)
    p.add_argument(*[s for s in spellings if s != shown], dest=dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def probe_args(g) -> None:
    """Probe batches of the field's convention: the reference measures on 10 held-out batches of 128."""
    g.add_argument("--probe-batches", type=int, default=10, metavar="N",
                   help="held-out probe batches per measurement (default: %(default)s)")
    g.add_argument("--probe-batch-size", type=int, default=128, metavar="N",
                   help="probe batch size B_p of the mean-loss reference (default: %(default)s)")


def check_probe_args(a: argparse.Namespace) -> tuple[int, int]:
    """``(batches, batch size)`` from the flags, refusing values that make the measurement meaningless."""
    if a.probe_batches < 1 or a.probe_batch_size < 2:
        raise UsageError("--probe-batches must be >= 1 and --probe-batch-size >= 2")
    return a.probe_batches, a.probe_batch_size


def plain_args(p: argparse.ArgumentParser, out: str) -> None:
    """Flags of the plain-backprop depth commands (saturation, grow)."""
    p.add_argument("--dataset", default="cifar10", help="an image dataset (default: %(default)s)")
    p.add_argument("--data-dir", "--data_dir", dest="data_dir", default=None, metavar="DIR", help="data folder/zip")
    p.add_argument("--download", action="store_true", help="download a missing CIFAR archive")
    p.add_argument("--epochs", type=int, default=10, metavar="N",
                   help="epochs per run; saturation: 0 = at initialisation (default: 10)")
    p.add_argument("--batch-size", type=int, default=None, metavar="N",
                   help="batch size (default: 128; hf: 8 windows)")
    p.add_argument("--lr", type=float, default=1e-3, metavar="X", help="AdamW lr, cosine (default: 1e-3)")
    p.add_argument("--weight-decay", type=float, default=0.01, metavar="X", help="AdamW weight decay (default: 0.01)")
    p.add_argument("--seed", type=int, default=42, metavar="N", help="seed (default: 42)")
    p.add_argument("--device", default="auto", metavar="DEV", help="cpu | cuda[:N] | auto (default: auto)")
    out_arg(p, out)
    sweep_args(p, stacking=False)


def resolve_device(spec: str) -> str:
    """``auto`` → ``cuda`` when available else ``cpu``; an unavailable CUDA device is a UsageError."""
    import torch

    if spec == "auto":
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(spec)
    except RuntimeError:
        raise UsageError(f"--device {spec!r} not understood; use cpu, cuda or cuda:N") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(f"--device {spec}: CUDA is not available here; use --device cpu")
        idx = dev.index or 0
        if idx >= torch.cuda.device_count():
            raise UsageError(f"--device {spec}: only {torch.cuda.device_count()} CUDA device(s)")
        return f"cuda:{idx}"
    if dev.type != "cpu":
        raise UsageError(f"--device {spec}: unsupported device type; use cpu or cuda[:N]")
    return "cpu"


def default_epochs(dataset: str) -> int:
    """The dataset's registered budget (CIFAR: 100, the protocol's), else the config default."""
    from ..data import DATASETS

    return DATASETS.meta(dataset).get("epochs", _defaults().epochs)


def config_from_args(a: argparse.Namespace, zero_epochs: bool = False) -> TrainConfig:
    """The frozen config, built once here and passed down (experiments vary method/seed/blocks from it).

    ``zero_epochs``: ``--epochs 0`` is meaningful (``train``: record the initial or warm-start weights).
    """
    if a.epochs == 0 and not zero_epochs:
        raise UsageError("--epochs 0 trains nothing (trained would equal frozen); give --epochs >= 1")
    if a.epochs == 0:
        _note("--epochs 0: nothing is trained; the record and checkpoint hold the initial (or --warm-start) weights")
    from ..data import DATASETS
    from ..methods import parse_spec, with_flags

    if (a.data_dir or a.download) and DATASETS.meta(a.dataset).get("generated"):
        _note(f"--{'data-dir' if a.data_dir else 'download'} has no effect with --dataset {a.dataset}: it is "
              "generated here, not read")
    flags = method_flag_values(a)
    unused_option_note(a, flags)
    opts = {}
    if getattr(a, "methods", None):  # parsed once, here: each entry a MethodSpec (its canonical label)
        labels = [with_flags(parse_spec(m), flags) for m in a.methods]
        dedup_note(labels, "--methods")  # `fa` and `fa:` are one row: said once, counted once
        a.methods = list(dict.fromkeys(labels))
    if getattr(a, "method", None):
        a.method_spec = with_flags(parse_spec(a.method), flags)
        a.method, opts = a.method_spec.name, dict(a.method_spec.given)
    return TrainConfig(
        dataset=a.dataset, data_dir=a.data_dir, download=a.download, augment=a.augment, arch=a.arch,
        variant=a.variant, d_hidden=a.d_hidden, num_blocks=a.num_blocks, mlp_ratio=a.mlp_ratio,
        method=getattr(a, "method", _defaults().method),
        train_blocks=getattr(a, "train_blocks", _defaults().train_blocks),
        epochs=a.epochs if a.epochs is not None else default_epochs(a.dataset), stop_after=a.stop_after,
        batch_size=a.batch_size, method_options=opts,
        credit_mix=getattr(a, "credit_mix", None), warm_start=getattr(a, "warm_start", None),
        lr=a.lr, weight_decay=a.weight_decay, scale_penalty=a.scale_penalty, penalty_form=a.penalty_form,
        seed=getattr(a, "seed", (getattr(a, "seeds", None) or [_defaults().seed])[0]), device=resolve_device(a.device))


def unused_option_note(a: argparse.Namespace, flags: dict) -> None:
    """A method-option flag that none of the chosen methods declares: say so on stderr (it has no effect)."""
    import sys

    from ..methods.specs import option_flags

    names = [getattr(a, "method", None)] if getattr(a, "method", None) else list(getattr(a, "methods", []) or [])
    chosen = {str(n).partition(":")[0] for n in names}
    owners = option_flags()
    for f in flags:
        if not chosen & set(owners[f][1]):
            print(f"depthaudit: note: --{f} is an option of {', '.join(owners[f][1])}; none of {', '.join(names)} "
                  "reads it", file=sys.stderr)


def _note(text: str) -> None:
    import sys

    print(f"depthaudit: note: {text}", file=sys.stderr)


def dedup_note(values: list, flag_name: str) -> None:
    """Repeated values count once (a seed twice would double-count it in mean ± std); say so on stderr."""
    import sys

    dups = sorted({str(v) for v in values if values.count(v) > 1})
    if dups:
        print(f"depthaudit: note: {flag_name} repeats {', '.join(dups)}; each value counts once", file=sys.stderr)
