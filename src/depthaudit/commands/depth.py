"""`depthaudit saturation` and `grow`: is the network deep enough?"""

import argparse
import sys
from pathlib import Path

from ..io import check_output_dir
from . import COMMANDS
from .args import dedup_note, plain_args, plain_recipe, remember_sweep, resolve_device, sweep_options
from .parser import NONNEG_FLOAT, NONNEG_INT, POS_FLOAT, POS_INT


def saturation_config(a: argparse.Namespace, device: str):
    """The :class:`~depthaudit.experiments.saturation.SaturationConfig` of the flags (the one place it is built)."""
    from ..experiments.saturation import SaturationConfig

    return SaturationConfig(
        family=a.family, dataset=a.dataset, data_dir=a.data_dir, download=a.download, extra=tuple(a.extra),
        epochs=a.epochs, batch_size=a.batch_size, lr=a.lr, weight_decay=a.weight_decay, seed=a.seed,
        analysis_batches=a.analysis_batches, low_signal=a.low_signal, alpha=a.alpha, device=device, text=a.text,
        context=a.context, d_hidden=a.d_hidden, base_blocks=a.base_blocks, method=a.method, arch=a.arch,
        analysis_split=a.analysis_split, delta=a.delta, margin=a.margin, base_width=a.base_width,
        model=tuple(a.model or ()), revision=a.revision, continue_steps=a.continue_steps,
        continue_lr=a.continue_lr, importance=a.importance, bootstrap=a.bootstrap, grow_steps=a.grow_steps,
        grow_lr=a.grow_lr, grow_train=a.grow_train, stop_after=a.stop_after)


def grow_config(a: argparse.Namespace, device: str):
    """The :class:`~depthaudit.experiments.grow.GrowConfig` of the flags (the one place it is built)."""
    from ..experiments.grow import GrowConfig

    return GrowConfig(family=a.family, dataset=a.dataset, data_dir=a.data_dir, download=a.download, extra=a.extra,
                      epochs=a.epochs, insert_at=tuple(a.insert_at) if a.insert_at else None,
                      batch_size=a.batch_size, lr=a.lr, weight_decay=a.weight_decay, seed=a.seed, device=device,
                      method=a.method, arch=a.arch, d_hidden=a.d_hidden, base_blocks=a.base_blocks,
                      base_width=a.base_width, stop_after=a.stop_after)


def cmd_saturation(a: argparse.Namespace, argv: list[str]) -> int:
    """Depth sweep (:func:`depthaudit.saturation`): train each depth, measure AG/AGmax/V, table + figure."""
    from .. import api
    from ..experiments.families import FAMILIES

    device = resolve_device(a.device)
    check_output_dir(a.out)
    family = FAMILIES.get(a.family)
    given_batch = a.batch_size  # None: the family's default (hf: 8 windows)
    if family.pretrained:
        if a.continue_steps and a.epochs is not None:
            print(f"depthaudit: note: --epochs is not used by --family {a.family} (--continue-steps sets the "
                  "training)", file=sys.stderr)
    plain_recipe(a, None if family.reads_text else a.dataset)  # --epochs: the budget, by default the dataset's
    a.batch_size = given_batch if family.pretrained else a.batch_size
    if not family.pretrained:
        dedup_note(a.extra, "--extra")
        if a.epochs == 0:
            print("depthaudit: note: --epochs 0 measures each depth at initialisation (untrained)", file=sys.stderr)
    return _run(api.saturation, saturation_config(a, device), a, argv, device)


def cmd_grow(a: argparse.Namespace, argv: list[str]) -> int:
    """Function-preserving growth vs scratch (:func:`depthaudit.grow`)."""
    from .. import api

    device = resolve_device(a.device)
    check_output_dir(a.out)
    plain_recipe(a, a.dataset)  # --epochs: the budget, by default the dataset's
    return _run(api.grow, grow_config(a, device), a, argv, device)


def _run(fn, cfg, a: argparse.Namespace, argv: list[str], device: str) -> int:
    """``fn(cfg)`` into ``--out`` under the sweep flags; print its card (or why it stopped)."""
    out = Path(a.out)
    opts = sweep_options(a, out, device)
    if opts.cell is not None:
        opts = remember_sweep(opts, out, argv)
    res = fn(cfg, out, sweep=opts, argv=["depthaudit", *argv])
    if res.stopped:  # --list-cells or one --cell: the sweep did what was asked, no report
        print(res.stopped)
        return 0
    print(res.card)
    print(f"\nwrote {res.path}, its .md and .png")
    return 0


def family_args(p) -> None:
    """``--method`` and ``--arch`` of the resmlp family (depth under a credit method); ``--base-width`` of resnet."""
    from ..models import MODELS

    p.add_argument("--base-width", type=POS_INT, default=16, metavar="W",
                   help="resnet: stage widths W, 2W, 4W (default: 16; the paper's ImageNet-100 runs use 32)")
    p.add_argument("--method", default=None, metavar="SPEC",
                   help="resmlp: credit method, any registered one with options, e.g. fa, dfa, fa-stream:identity "
                   "(default: bp)")
    p.add_argument("--arch", default="resmlp", choices=MODELS.names(),
                   help="resmlp: the residual model (default: resmlp)")


def _family_help(names: list[str]) -> str:
    from ..experiments.families import FAMILIES

    return " | ".join(f"{n} ({FAMILIES.get(n).help})" for n in names) + "; default: resnet"


def register(sub) -> None:
    """Add this module's subcommands to the CLI's subparsers (each with its own flags and ``func``)."""
    from ..experiments.families import FAMILIES
    sa = sub.add_parser("saturation", help=COMMANDS["saturation"][1],
                        description="Train ResNet-8 + N (or a GPT decoder of base + N blocks) for each --extra N "
                        "(plain backprop), then measure AG_l, AGmax, the growth value V_l and the gradient-matched "
                        "insertion's loss change at every candidate.")
    sa.add_argument("--family", choices=FAMILIES.names(), default="resnet", help=_family_help(FAMILIES.names()))
    family_args(sa)
    sa.add_argument("--model", nargs="+", default=None, metavar="NAME",
                    help="hf: Hub names or local folders of causal LMs (needs depthaudit[hf])")
    sa.add_argument("--revision", default=None, advanced=True, metavar="REV",
                    help="hf: model revision, e.g. step143000")
    sa.add_argument("--continue-steps", type=NONNEG_INT, default=0, metavar="N",
                    help="hf: continue pretraining N AdamW steps on --text first (default: 0)")
    sa.add_argument("--continue-lr", type=POS_FLOAT, default=1e-5, metavar="X",
                    help="hf: its lr (default: 1e-5)", advanced=True)
    sa.add_argument("--importance", nargs="*", type=POS_INT, default=None, metavar="N",
                    help="hf: also Block Influence, angular distance l->l+N and the measured loss of removing each "
                    "block and each N-block set a rule prunes, beside AG and V (default N: 1 2 4 8)")
    sa.add_argument("--bootstrap", type=POS_INT, default=1000, metavar="R", advanced=True,
                    help="hf --importance: bootstrap resamples of the windows for the rank correlations "
                    "(default: 1000)")
    sa.add_argument("--grow-steps", type=NONNEG_INT, default=0, metavar="N",
                    help="hf: insert the zero block at the highest-V and at the lowest-V boundary and train each, and "
                    "the model without insertion, N steps on --text (default: 0, off)")
    sa.add_argument("--grow-lr", type=POS_FLOAT, default=1e-3, metavar="X", advanced=True,
                    help="hf --grow-steps: the new block's lr (default: 1e-3); the model's is --continue-lr")
    sa.add_argument("--grow-train", choices=["all", "block"], default="all", advanced=True,
                    help="hf --grow-steps: train the pretrained weights too, or only the new block (default: all)")
    sa.add_argument("--text", default=None, metavar="FILE",
                    help="gpt: UTF-8 text or .npy tokens (default: the embedded text, no download)")
    sa.add_argument("--context", type=POS_INT, default=64, metavar="T", help="gpt: context length (default: 64)")
    sa.add_argument("--d-hidden", type=POS_INT, default=None, metavar="N", help="gpt, resmlp: width (default: 64, 256)")
    sa.add_argument("--base-blocks", type=POS_INT, default=1, metavar="N",
                    help="gpt, resmlp: blocks before the extras (default: 1)")
    sa.add_argument("--extra", nargs="+", type=NONNEG_INT, default=[0, 1, 2, 3, 6], metavar="N",
                    help="extra blocks N added to ResNet-8 (default: 0 1 2 3 6)")
    sa.add_argument("--analysis-batches", type=POS_INT, default=4, metavar="B", help="analysis batches (default: 4)")
    sa.add_argument("--low-signal", type=POS_FLOAT, default=5e-3, metavar="X", help="AGmax flag level (default: 5e-3)")
    sa.add_argument("--analysis-split", choices=["test", "train"], default="test",
                    help="where AG is measured: held out (never fitted on) or training batches (default: test)")
    sa.add_argument("--delta", type=NONNEG_FLOAT, default=None, advanced=True, metavar="X",
                    help="separated test: δ of H0 Γ ≤ δ (default: --low-signal)")
    sa.add_argument("--margin", type=NONNEG_FLOAT, default=None, advanced=True, metavar="T",
                    help="separated test: t, decided at AGmax > δ + t (default: 2 standard errors, ours)")
    sa.add_argument("--alpha", type=POS_FLOAT, default=1e-3, metavar="X",
                    help="gradient-matched insertion: fit the new block to -α·g (default: 1e-3)")
    plain_args(sa, "results/saturation")
    sa.set_defaults(func=cmd_saturation)

    gr = sub.add_parser("grow", help=COMMANDS["grow"][1],
                        description="Grow ResNet-8 to ResNet-8 + N by zero-output insertions during training and "
                        "compare final train/test loss with ResNet-8 + N trained from scratch for the same budget.")
    growable = [n for n in FAMILIES.names() if FAMILIES.get(n).growable]
    gr.add_argument("--family", choices=growable, default="resnet", help=_family_help(growable))
    family_args(gr)
    gr.add_argument("--d-hidden", type=POS_INT, default=None, metavar="N", help="resmlp: width (default: 256)")
    gr.add_argument("--base-blocks", type=POS_INT, default=1, metavar="N",
                    help="resmlp: blocks to start from (default: 1)")
    gr.add_argument("--extra", type=NONNEG_INT, default=3, metavar="N", help="blocks to grow (default: 3)")
    gr.add_argument("--insert-at", nargs="+", type=POS_INT, default=None, metavar="E",
                    help="epoch of each insertion (default: evenly over the first half)")
    plain_args(gr, "results/grow")
    gr.set_defaults(func=cmd_grow)
