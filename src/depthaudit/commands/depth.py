"""`depthaudit saturation` and `grow`: is the network deep enough?"""

import argparse
import sys
from pathlib import Path

import torch

from ..errors import UsageError
from ..io import check_output_dir
from . import COMMANDS
from .args import plain_args, remember_sweep, resolve_device, sweep_options


def cmd_saturation(a: argparse.Namespace, argv: list[str]) -> int:
    """Depth sweep of ResNet-CIFAR: train each depth, measure AG/AGmax/V, table + figure."""
    from ..data import load_data
    from ..experiments.saturation import SaturationRun, run_depth
    from ..io import write_text
    from ..report.saturation import saturation_figure, saturation_md, saturation_title
    from ..sweep import FileStore, RunSpec, run_sweep

    device = resolve_device(a.device)
    check_output_dir(a.out)
    if any(n < 0 for n in a.extra) or a.epochs < 0 or a.analysis_batches < 1:
        raise UsageError("--extra values must be >= 0, --epochs >= 0, --analysis-batches >= 1")
    if a.family == "gpt":
        from ..data.text import load_text

        if a.d_hidden % 4:
            raise UsageError(f"--d-hidden {a.d_hidden}: the GPT decoder has 4 heads, so the width must be a multiple "
                             "of 4 (e.g. 64)")

        data = load_text(a.text, a.context, torch.device(device))  # validates the text now
        name, sha = "text", data.sha256
    else:
        data = load_data(a.dataset, a.data_dir, a.download, torch.device(device))
        if len(data.input_shape) != 3:
            raise UsageError(f"saturation trains ResNet-CIFAR on images; {a.dataset} is not an image dataset")
        name, sha = a.dataset, data.sha256
    specs = [RunSpec(f"N{n}", SaturationRun(a.dataset, a.data_dir, n, a.epochs, a.batch_size, a.lr, a.weight_decay,
                                            a.seed, a.analysis_batches, a.low_signal, a.alpha, device, a.family,
                                            a.text, a.context, a.d_hidden, a.base_blocks),
                     runner=run_depth) for n in dict.fromkeys(a.extra)]
    out = Path(a.out)
    ident = {"family": a.family, "data": name, "data_sha256": sha, "epochs": a.epochs, "seed": a.seed,
             "batch_size": a.batch_size, "lr": a.lr, "weight_decay": a.weight_decay,
             "analysis_batches": a.analysis_batches}
    if a.family == "gpt":
        ident.update(context=a.context, d_hidden=a.d_hidden, base_blocks=a.base_blocks)
    store = FileStore(out / f"saturation_{a.family}_{name}.json", "depthaudit.saturation.v1", ident)
    data = data if a.family == "resnet" else None
    opts = sweep_options(a, out, device)
    if opts.cell is not None:
        remember_sweep(out, argv)
    run_sweep(specs, store, data=data if a.jobs == 1 else None, argv=["depthaudit", *argv], opts=opts)
    table = saturation_md(store.doc)
    saturation_figure(store.doc, store.path.with_suffix(".png"), a.low_signal)
    write_text(store.path.with_suffix(".md"), f"# {saturation_title(store.doc)}"
               f"\n\n{table}\n\n![saturation]({store.path.with_suffix('.png').name})\n")
    print(table)
    print(f"\nwrote {store.path}, its .md and .png")
    return 0


def cmd_grow(a: argparse.Namespace, argv: list[str]) -> int:
    """Function-preserving growth vs scratch for ResNet-8 + N."""
    from ..data import load_data
    from ..experiments.grow import GrowRun, default_schedule, run_arm
    from ..io import write_text
    from ..report.saturation import grow_figure, grow_md, grow_title
    from ..sweep import FileStore, RunSpec, run_sweep

    device = resolve_device(a.device)
    check_output_dir(a.out)
    if a.extra < 1:
        raise UsageError(f"--extra {a.extra}: grow needs at least 1 block to insert")
    if a.epochs < 1:
        raise UsageError("--epochs must be >= 1 for grow (insertions happen at epoch starts)")
    sched = tuple(a.insert_at) if a.insert_at else default_schedule(a.extra, a.epochs)
    bad = any(not 1 <= e <= a.epochs for e in sched) or list(sched) != sorted(sched)
    if a.extra < 1 or len(sched) != a.extra or bad:
        raise UsageError(f"--insert-at needs {a.extra} non-decreasing epochs in 1..{a.epochs} (one per extra block)")
    data = load_data(a.dataset, a.data_dir, a.download, torch.device(device))
    if len(data.input_shape) != 3:
        raise UsageError(f"grow trains ResNet-CIFAR on images; {a.dataset} is not an image dataset")
    specs = [RunSpec(arm, GrowRun(arm, a.dataset, a.data_dir, a.extra, a.epochs, sched, a.batch_size, a.lr,
                                  a.weight_decay, a.seed, device), runner=run_arm) for arm in ("grown", "scratch")]
    out = Path(a.out)
    store = FileStore(out / f"grow_resnet8+{a.extra}_{a.dataset}.json", "depthaudit.grow.v1",
                      {"dataset": a.dataset, "data_sha256": data.sha256, "extra": a.extra, "epochs": a.epochs,
                       "insert_at": list(sched), "seed": a.seed})
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    opts = sweep_options(a, out, device)
    if opts.cell is not None:
        remember_sweep(out, argv)
    run_sweep(specs, store, data=data if a.jobs == 1 else None, argv=["depthaudit", *argv], run_log=log, opts=opts)
    table = grow_md(store.doc)
    grow_figure(store.doc, store.path.with_suffix(".png"))
    write_text(store.path.with_suffix(".md"), f"# {grow_title(store.doc)}\n\n{table}\n\n"
               f"![grow]({store.path.with_suffix('.png').name})\n")
    print(table)
    print(f"\nwrote {store.path}, its .md and .png")
    return 0


def register(sub) -> None:
    """Add this module's subcommands to the CLI's subparsers (each with its own flags and ``func``)."""
    sa = sub.add_parser("saturation", help=COMMANDS["saturation"][1],
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
    plain_args(sa, "results/saturation")
    sa.set_defaults(func=cmd_saturation)

    gr = sub.add_parser("grow", help=COMMANDS["grow"][1],
                        description="Grow ResNet-8 to ResNet-8 + N by zero-output insertions during training and "
                        "compare final train/test loss with ResNet-8 + N trained from scratch for the same budget.")
    gr.add_argument("--extra", type=int, default=3, metavar="N", help="blocks to grow (default: 3)")
    gr.add_argument("--insert-at", nargs="+", type=int, default=None, metavar="E",
                    help="epoch of each insertion (default: evenly over the first half)")
    plain_args(gr, "results/grow")
    gr.set_defaults(func=cmd_grow)
