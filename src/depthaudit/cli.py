"""Command-line interface: ``depthaudit train …``. Every choice list is a registry's keys."""

import argparse
import importlib
import os
import sys

import torch

from . import __version__
from .config import TrainConfig
from .errors import UsageError

DEFAULTS = TrainConfig()


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line (exit 2), not a usage dump; compact help."""

    def __init__(self, *args, **kw):
        kw.setdefault("formatter_class", lambda prog: argparse.HelpFormatter(prog, max_help_position=30, width=100))
        if kw.get("prog", "").count(" "):  # subcommands: the groups below say it all
            kw.setdefault("usage", "%(prog)s [options]")
        super().__init__(*args, **kw)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _flag(group, name: str, **kw):
    """Add ``--name-with-dashes`` and its ``--name_with_underscores`` spelling (the seed harness's)."""
    dashed = "--" + name.replace("_", "-")
    spellings = [dashed] if "_" not in name else [dashed, "--" + name]
    if "default" in kw and "help" in kw and kw["default"] not in (None, False):
        kw["help"] += " (default: %(default)s)"
    if kw.get("type") in (int, float) and "metavar" not in kw:
        kw["metavar"] = "N" if kw["type"] is int else "X"
    group.add_argument(*spellings, dest=name, **kw)


def add_train_args(p: argparse.ArgumentParser, per_run: bool = True) -> None:
    """Flags shared by every command that trains (``per_run``: also --method, --train-blocks, --seed)."""
    from .data import DATASETS
    from .data.augment import AUGMENTS
    from .methods import METHODS
    from .models import MODELS
    from .models.resmlp import VARIANTS

    g = p.add_argument_group("data")
    _flag(g, "dataset", default=DEFAULTS.dataset, choices=DATASETS.names(), help="dataset")
    _flag(g, "data_dir", default=None, metavar="DIR", help="folder or .zip holding the data (cifar*)")
    _flag(g, "download", action="store_true", help="download a missing CIFAR archive (verified by md5)")
    _flag(g, "augment", default="auto", choices=["auto", *AUGMENTS],
          help="training augmentation; auto = the dataset's (CIFAR: crop+flip, pad 4)")
    g = p.add_argument_group("model")
    _flag(g, "arch", default=DEFAULTS.arch, choices=MODELS.names(), help="residual model")
    _flag(g, "variant", default=DEFAULTS.variant, choices=VARIANTS,
          help="ref = the published protocol's model; v0.1 = depthaudit 0.1's (ours)")
    _flag(g, "d_hidden", type=int, default=DEFAULTS.d_hidden, help="stream width d")
    _flag(g, "num_blocks", type=int, default=DEFAULTS.num_blocks, help="residual blocks L")
    _flag(g, "mlp_ratio", type=int, default=None, help="MLP expansion (default: the variant's; ResMLP ref 1)")
    g = p.add_argument_group("credit and recipe")
    if per_run:
        _flag(g, "method", default=DEFAULTS.method, choices=METHODS.names(), help="credit method")
        _flag(g, "train_blocks", default=DEFAULTS.train_blocks, help="all | none | last:k | first:k")
        _flag(g, "credit_mix", type=float, default=None, help="credit mix (ours): (1-α)·method + α·BP credit")
        _flag(g, "warm_start", default=None, metavar="PT", help="BP warm start (ours): start from these weights")
    else:
        _flag(g, "methods", nargs="+", default=["bp", "fa", "dfa"], metavar="M",
              help=f"credit methods, from {{{','.join(METHODS.names())}}}; a variant as a row of its own: "
              "name:key=value (e.g. fa:head=exact, fa-stream:identity)")
        _flag(g, "seeds", nargs="+", type=int, default=[42], metavar="S", help="seeds (mean ± std, ddof 1)")
    _flag(g, "fa_head", default=DEFAULTS.fa_head, choices=["feedback", "exact"],
          help="fa & relatives: readout by feedback (Lillicrap) or exact")
    _flag(g, "fa_stream_identity", action="store_true", help="fa-stream: keep the identity, c + c·Bᵀ")
    _flag(g, "fa_stream_scale", type=float, default=DEFAULTS.fa_stream_scale, help="fa-stream: B ~ N(0, s²/d)")
    _flag(g, "cb_sigma", type=float, default=DEFAULTS.cb_sigma, help="cb: noise σ of the consistency target")
    _flag(g, "cb_draws", type=int, default=DEFAULTS.cb_draws, help="cb: noise draws of the soft-min (ours)")
    _flag(g, "ep_beta", type=float, default=DEFAULTS.ep_beta, help="ep: nudging strength β")
    _flag(g, "ep_steps", type=int, default=DEFAULTS.ep_steps, help="ep: nudged-phase steps T")
    _flag(g, "ep_step_size", type=float, default=DEFAULTS.ep_step_size, help="ep: step size η (ours)")
    _flag(g, "ep_credit", default=DEFAULTS.ep_credit, choices=["state", "error"],
          help="ep: state = -Δh/β (protocol) | error = -r/β (ours)")
    _flag(g, "epochs", type=int, default=None,
          help="budget: the cosine schedule spans it (default: the dataset's; CIFAR 100, others 20)")
    _flag(g, "stop_after", type=int, default=None, help="train only the first N epochs of that schedule")
    _flag(g, "batch_size", type=int, default=DEFAULTS.batch_size, help="batch size")
    _flag(g, "lr", type=float, default=DEFAULTS.lr, help="AdamW learning rate (cosine to 0)")
    _flag(g, "weight_decay", type=float, default=DEFAULTS.weight_decay, help="AdamW weight decay")
    _flag(g, "scale_penalty", type=float, default=DEFAULTS.scale_penalty, help="scale penalty λ")
    _flag(g, "penalty_form", default=DEFAULTS.penalty_form, choices=["abs", "rel"],
          help="abs = λ‖f‖² (reference) | rel = λ‖f‖²/‖h‖² (ours)")
    if per_run:
        _flag(g, "seed", type=int, default=DEFAULTS.seed, help="seed (init, feedback, shuffle)")
    _flag(g, "device", default="auto", metavar="DEV", help="cpu | cuda | cuda:N | auto = cuda if available")


def resolve_device(spec: str) -> str:
    """``auto`` → ``cuda`` when available else ``cpu``; an unavailable CUDA device is a UsageError."""
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
    from .data import DATASETS

    return DATASETS.meta(dataset).get("epochs", DEFAULTS.epochs)


def config_from_args(a: argparse.Namespace) -> TrainConfig:
    """The frozen config, built once here and passed down (experiments vary method/seed/blocks from it)."""
    return TrainConfig(
        dataset=a.dataset, data_dir=a.data_dir, download=a.download, augment=a.augment, arch=a.arch,
        variant=a.variant, d_hidden=a.d_hidden, num_blocks=a.num_blocks, mlp_ratio=a.mlp_ratio,
        method=getattr(a, "method", DEFAULTS.method), train_blocks=getattr(a, "train_blocks", DEFAULTS.train_blocks),
        epochs=a.epochs if a.epochs is not None else default_epochs(a.dataset), stop_after=a.stop_after,
        batch_size=a.batch_size, ep_beta=a.ep_beta, ep_steps=a.ep_steps, ep_step_size=a.ep_step_size,
        ep_credit=a.ep_credit, cb_sigma=a.cb_sigma, cb_draws=a.cb_draws, fa_head=a.fa_head,
        fa_stream_identity=a.fa_stream_identity, fa_stream_scale=a.fa_stream_scale,
        credit_mix=getattr(a, "credit_mix", None), warm_start=getattr(a, "warm_start", None),
        lr=a.lr, weight_decay=a.weight_decay, scale_penalty=a.scale_penalty, penalty_form=a.penalty_form,
        seed=getattr(a, "seed", (getattr(a, "seeds", None) or [DEFAULTS.seed])[0]), device=resolve_device(a.device))


def build_parser() -> argparse.ArgumentParser:
    """The full parser (plug-ins must be imported first so their names are choices)."""
    p = _Parser(prog="depthaudit", description="Audit whether a credit-assignment method trains depth.")
    p.add_argument("--version", action="version", version=f"depthaudit {__version__}")
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                   help="import MODULE first (it may register methods, models, datasets)")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    t = sub.add_parser("train", help="train one model under one credit method",
                       description="Train one residual model under one credit method (SPEC §2 recipe).")
    add_train_args(t)
    g = t.add_argument_group("output")
    g.add_argument("--out", default=None, help="output folder (default: runs/<config>)")
    g.add_argument("--force", action="store_true", help="overwrite an existing result.json")
    g.add_argument("--no-checkpoint", "--no_checkpoint", dest="no_checkpoint", action="store_true",
                   help="do not write checkpoint.pt (weights + feedback)")
    t.set_defaults(func="run:cmd_train")

    def audit_args(ap, out_default):
        add_train_args(ap, per_run=False)
        g = ap.add_argument_group("measurement and thresholds")
        _probe_args(g)
        g.add_argument("--track-every", "--track_every", dest="track_every", type=int, default=1, metavar="N",
                       help="measure every N epochs; 0 = end only (default: %(default)s)")
        g.add_argument("--d1-stat", choices=["median", "mean"], default="median",
                       help="per-example stream norm statistic for D1 (default: median, the reference's)")
        g.add_argument("--stop-on-flag", action="store_true",
                       help="end a trained run at the epoch D1 or D2 first fires (status stopped_flagged)")
        g.add_argument("--functional", action="store_true",
                       help="also measure perturbation correlation, nudging and the fresh-B null at the end")
        g.add_argument("--fresh-b-draws", type=int, default=20, metavar="N",
                       help="fresh feedback draws of the null (default: %(default)s; 0 = skip)")
        g.add_argument("--rho-max", type=float, default=50.0, metavar="X", help="D1 flag when ρ > X (default: 50)")
        g.add_argument("--eps", type=float, default=1e-8, metavar="X", help="cosine floor ε (default: 1e-8)")
        g.add_argument("--ref-factor", type=float, default=10.0, metavar="X",
                       help="D2 flag when ‖g_L‖ < X·ε (default: 10)")
        g.add_argument("--gap-min", type=float, default=2.0, metavar="X", help="D3 flag when gap < X pp (default: 2)")
        ap.add_argument("--out", default=out_default, help="output folder (default: %(default)s)")
        ap.add_argument("--jobs", type=int, default=1, metavar="N", help="parallel training processes (default: 1)")

    au = sub.add_parser("audit", help="the audit protocol: standard pair vs D1/D2/D3 and per-layer cosine",
                        description="Train each method (all blocks, tracked) and its frozen-blocks baseline; "
                        "report the standard pair beside D1 scale, D2 reference validity, D3 depth utility.")
    audit_args(au, "results/audit")
    au.set_defaults(func="audit:cmd_audit")

    iv = sub.add_parser("intervene", help="scale-penalty intervention: the audit over a λ grid",
                        description="Run the audit at every λ of --lambdas (the reference's grid and 30 epochs by "
                        "default); report D1/D2/D3, accuracy and per-layer cosines side by side, and a figure.")
    audit_args(iv, "results/intervene")
    iv.set_defaults(methods=["dfa"], epochs=30)
    iv.add_argument("--lambdas", nargs="+", type=float, default=[0.0, 1e-4, 1e-2, 1e-1], metavar="λ",
                    help="λ grid of the penalty (default: the reference's 0 1e-4 1e-2 1e-1)")
    iv.add_argument("--penalty", type=float, default=None, metavar="X", help="shorthand for --lambdas 0 X")
    iv.set_defaults(func="audit:cmd_intervene")

    br = sub.add_parser("probes", help="our probes: credit-mix α sweep and BP warm start for one method",
                        description="Ours, not the protocol's methods. Credit mix: train with (1-α)·method + α·BP "
                        "credit over --alphas. BP warm start (--pre-epochs > 0): BP first, then the method from there.")
    add_train_args(br, per_run=False)
    br.set_defaults(methods=None)
    br.add_argument("--method", default="dfa", help="the method to mix with BP (default: dfa)")
    br.add_argument("--alphas", nargs="+", type=float, default=[0.0, 0.25, 0.5, 0.75, 1.0], metavar="A",
                    help="α grid (default: 0 0.25 0.5 0.75 1)")
    br.add_argument("--pre-epochs", type=int, default=0, metavar="N", help="BP warm start: BP epochs first (0 = skip)")
    _probe_args(br)
    br.add_argument("--jobs", type=int, default=1, metavar="N", help="parallel training processes (default: 1)")
    br.add_argument("--out", default="results/probes", help="output folder (default: %(default)s)")
    br.set_defaults(func="audit:cmd_probes")

    la = sub.add_parser("ladder", help="depth-utility ladder: train the last k blocks, k = 0..L",
                        description="For each method, k and seed train only the last k blocks; one resumable JSON "
                        "per configuration (ladder_d{d}_L{L}_{dataset}.json), a table and a figure.")
    add_train_args(la, per_run=False)
    la.set_defaults(dataset="cifar10", seeds=[42, 123, 456], epochs=100)
    g = la.add_argument_group("ladder")
    g.add_argument("--k_values", "--k-values", dest="k_values", nargs="+", type=int, default=None, metavar="K",
                   help="rungs k (default: 0..num_blocks)")
    g.add_argument("--gpu", type=int, default=None, metavar="N", help="use cuda:N (same as --device cuda:N)")
    g.add_argument("--jobs", type=int, default=1, help="trainings in parallel processes (default: %(default)s)")
    _probe_args(g)
    g.add_argument("--output_dir", "--output-dir", dest="output_dir", default="results/depth_ladder",
                   help="folder for the ladder JSON, table and figure (default: %(default)s)")
    g.add_argument("--audit-dir", default=None, help="an audit --out folder to cross-check k=0 and k=L against")
    g.add_argument("--verbose", action="store_true", help="print every epoch of every run")
    la.set_defaults(func="ladder:cmd_ladder")

    rp = sub.add_parser("report", help="rebuild tables and figures from saved JSON (no training)",
                        description="Rebuild ladder tables/figures (ladder_*.json) and the audit report "
                        "(report.json) found in DIR.")
    rp.add_argument("dir", metavar="DIR", help="an audit --out or ladder --output_dir folder")
    rp.add_argument("--audit-dir", default=None, help="cross-check ladder k=0/k=L against this audit folder")
    rp.set_defaults(func="ladder:cmd_report")

    sa = sub.add_parser("saturation", help="depth sweep: AG, AGmax and growth value V vs depth",
                        description="Train ResNet-8 + N (or a GPT decoder of base + N blocks) for each --extra N "
                        "(plain backprop), then measure AG_l, AGmax, the growth value V_l and the gradient-matched "
                        "insertion's loss change at every candidate.")
    sa.add_argument("--family", choices=["resnet", "gpt"], default="resnet", help="model family (default: resnet)")
    sa.add_argument("--text", default=None, metavar="FILE",
                    help="gpt: UTF-8 text or .npy tokens (default: the embedded text, no download)")
    sa.add_argument("--context", type=int, default=64, metavar="T", help="gpt: context length (default: 64)")
    sa.add_argument("--d-hidden", type=int, default=64, metavar="N", help="gpt: width (default: 64)")
    sa.add_argument("--base-blocks", type=int, default=1, metavar="N",
                    help="gpt: blocks before the extras (default: 1)")
    sa.add_argument("--extra", nargs="+", type=int, default=[0, 1, 2, 3, 6], metavar="N",
                    help="extra blocks N added to ResNet-8 (default: 0 1 2 3 6)")
    sa.add_argument("--analysis-batches", type=int, default=4, metavar="B", help="analysis batches (default: 4)")
    sa.add_argument("--low-signal", type=float, default=5e-3, metavar="X", help="AGmax flag level (default: 5e-3)")
    sa.add_argument("--alpha", type=float, default=1e-3, metavar="X",
                    help="gradient-matched insertion: fit the new block to -α·g (default: 1e-3)")
    _plain_args(sa, "results/saturation")
    sa.set_defaults(func="depth:cmd_saturation")

    gr = sub.add_parser("grow", help="function-preserving growth vs the same architecture from scratch",
                        description="Grow ResNet-8 to ResNet-8 + N by zero-output insertions during training and "
                        "compare final train/test loss with ResNet-8 + N trained from scratch for the same budget.")
    gr.add_argument("--extra", type=int, default=3, metavar="N", help="blocks to grow (default: 3)")
    gr.add_argument("--insert-at", nargs="+", type=int, default=None, metavar="E",
                    help="epoch of each insertion (default: evenly over the first half)")
    _plain_args(gr, "results/grow")
    gr.set_defaults(func="depth:cmd_grow")

    idt = sub.add_parser("identity", help="frozen-init identity check over seeds",
                         description="At random init: per-block |f_l(h)|/|h|, |h_L-h_0|/|h_0|, cos(h_L, h_0).")
    add_train_args(idt, per_run=False)
    _probe_args(idt)
    idt.add_argument("--out", default=None, help="write the numbers to this JSON file")
    idt.set_defaults(func="audit:cmd_identity")
    return p


def _probe_args(g) -> None:
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


def _plain_args(p: argparse.ArgumentParser, out: str) -> None:
    """Flags of the plain-backprop depth commands (saturation, grow)."""
    p.add_argument("--dataset", default="cifar10", help="an image dataset (default: %(default)s)")
    p.add_argument("--data-dir", "--data_dir", dest="data_dir", default=None, metavar="DIR", help="data folder/zip")
    p.add_argument("--download", action="store_true", help="download a missing CIFAR archive")
    p.add_argument("--epochs", type=int, default=10, metavar="N", help="epochs per run (default: 10)")
    p.add_argument("--batch-size", type=int, default=128, metavar="N", help="batch size (default: 128)")
    p.add_argument("--lr", type=float, default=1e-3, metavar="X", help="AdamW lr, cosine (default: 1e-3)")
    p.add_argument("--weight-decay", type=float, default=0.01, metavar="X", help="AdamW weight decay (default: 0.01)")
    p.add_argument("--seed", type=int, default=42, metavar="N", help="seed (default: 42)")
    p.add_argument("--device", default="auto", metavar="DEV", help="cpu | cuda[:N] | auto (default: auto)")
    p.add_argument("--jobs", type=int, default=1, metavar="N", help="parallel training processes (default: 1)")
    p.add_argument("--out", default=out, help="output folder (default: %(default)s)")


def _import_plugins(argv: list[str]) -> None:
    if "" not in sys.path and os.getcwd() not in sys.path:  # like `python -m`: modules beside you import
        sys.path.insert(0, os.getcwd())
    for i, tok in enumerate(argv):
        name = argv[i + 1] if tok == "--plugin" and i + 1 < len(argv) else (
            tok.split("=", 1)[1] if tok.startswith("--plugin=") else None)
        if name:
            try:
                importlib.import_module(name)
            except ImportError as exc:
                raise UsageError(f"--plugin {name}: cannot import it ({exc}); check PYTHONPATH") from None


def main(argv: list[str] | None = None) -> int:
    """Entry point; bad input prints one line and returns 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        _import_plugins(argv)
        args = build_parser().parse_args(argv)
        module, name = args.func.split(":")  # commands load on use: --help stays fast
        return getattr(importlib.import_module(f"depthaudit.commands.{module}"), name)(args, argv)
    except UsageError as exc:
        print(f"depthaudit: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("depthaudit: interrupted; nothing half-written was left", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
