"""`depthaudit saturation` and `grow`: is the network deep enough?"""

import argparse
import sys
from pathlib import Path

import torch

from ..errors import UsageError
from ..io import check_output_dir
from . import COMMANDS
from .args import dedup_note, plain_args, remember_sweep, resolve_device, sweep_options


def cmd_saturation(a: argparse.Namespace, argv: list[str]) -> int:
    """Depth sweep of ResNet-CIFAR: train each depth, measure AG/AGmax/V, table + figure."""
    from ..data import load_data
    from ..experiments.saturation import SaturationRun, run_depth
    from ..sweep import FileStore, RunSpec, run_sweep

    device = resolve_device(a.device)
    check_output_dir(a.out)
    if a.family == "hf":
        return _saturation_hf(a, argv, device)
    if a.model or a.revision or a.continue_steps or a.importance is not None or a.grow_steps:
        raise UsageError("--model, --revision, --continue-steps, --importance and --grow-steps are for pretrained "
                         "models; add --family hf")
    a.batch_size = a.batch_size or 128
    dedup_note(a.extra, "--extra")
    if a.family == "resnet" and (a.text is not None or a.d_hidden is not None):
        given = "--text" if a.text is not None else "--d-hidden"
        raise UsageError(f"{given} is for --family gpt/resmlp; ResNet-8 + N reads images and has fixed widths")
    if a.epochs == 0:
        print("depthaudit: note: --epochs 0 measures each depth at initialisation (untrained)", file=sys.stderr)
    if a.family == "gpt" and a.data_dir is not None:
        raise UsageError("--data-dir is for image datasets; the gpt family reads --text")
    if any(n < 0 for n in a.extra) or a.epochs < 0 or a.analysis_batches < 1:
        raise UsageError("--extra values must be >= 0, --epochs >= 0, --analysis-batches >= 1")
    method, d_hidden = family_method(a, "saturation")
    if a.family == "gpt":
        from ..data.text import load_text

        if d_hidden % 4:
            raise UsageError(f"--d-hidden {d_hidden}: the GPT decoder has 4 heads, so the width must be a multiple "
                             "of 4 (e.g. 64)")

        data = load_text(a.text, a.context, torch.device(device))  # validates the text now
        name, sha = "text", data.sha256
    else:
        data = load_data(a.dataset, a.data_dir, a.download, torch.device(device))
        if a.family == "resnet" and len(data.input_shape) != 3:
            raise UsageError(f"saturation trains ResNet-CIFAR on images; {a.dataset} is not an image dataset "
                             "(--family resmlp takes any dataset)")
        name, sha = a.dataset, data.sha256
    specs = [RunSpec(f"N{n}", SaturationRun(a.dataset, a.data_dir, n, a.epochs, a.batch_size, a.lr, a.weight_decay,
                                            a.seed, a.analysis_batches, a.low_signal, a.alpha, device, a.family,
                                            a.text, a.context, d_hidden, a.base_blocks, method, a.arch,
                                            a.analysis_split, a.delta, a.margin, a.base_width),
                     runner=run_depth) for n in dict.fromkeys(a.extra)]
    if a.family == "resmlp":
        check_recipe(specs[0].cfg.recipe(), data)
    out = Path(a.out)
    ident = {"family": a.family, "data": name, "data_sha256": sha, "epochs": a.epochs, "seed": a.seed,
             "batch_size": a.batch_size, "lr": a.lr, "weight_decay": a.weight_decay,
             "analysis_batches": a.analysis_batches}
    if a.family == "gpt":
        ident.update(context=a.context, d_hidden=d_hidden, base_blocks=a.base_blocks)
    if a.family == "resnet" and a.base_width != 16:  # (absent at the default: earlier files stay the same file)
        ident["base_width"] = a.base_width
    family = a.family
    if a.family == "resmlp":
        ident.update(arch=a.arch, d_hidden=d_hidden, base_blocks=a.base_blocks, method=method)
        family = f"{a.arch}_{slug(method)}"
    store = FileStore(out / f"saturation_{family}_{name}.json", "depthaudit.saturation.v1", ident)
    data = None if a.family == "gpt" else data
    opts = sweep_options(a, out, device)
    if opts.cell is not None:
        opts = remember_sweep(opts, out, argv)
    run_sweep(specs, store, data=data if a.jobs == 1 else None, argv=["depthaudit", *argv], opts=opts)
    return _write_saturation(store, a.low_signal)


def _write_saturation(store, low_signal: float) -> int:
    """The sweep's table, figure and .md next to its JSON (every family; the report functions pick the layout)."""
    from ..io import write_text
    from ..report.saturation import saturation_figure, saturation_md, saturation_title

    table = saturation_md(store.doc)
    saturation_figure(store.doc, store.path.with_suffix(".png"), low_signal)
    write_text(store.path.with_suffix(".md"), f"# {saturation_title(store.doc)}"
               f"\n\n{table}\n\n![saturation]({store.path.with_suffix('.png').name})\n")
    print(table)
    print(f"\nwrote {store.path}, its .md and .png")
    return 0


def _saturation_hf(a: argparse.Namespace, argv: list[str], device: str) -> int:
    """``--family hf``: one cell per ``--model``; AG/V at every layer boundary; cross-model table + figure."""
    from ..experiments.pretrained import PretrainedRun, run_pretrained
    from ..models.hf import require_transformers
    from ..sweep import FileStore, RunSpec, run_sweep

    require_transformers()
    if not a.model:
        raise UsageError("--family hf needs --model NAME_OR_PATH [...] (e.g. EleutherAI/pythia-70m-deduped)")
    if a.text is not None and not Path(a.text).is_file():
        raise UsageError(f"--text {a.text}: no such file; give a UTF-8 text file or a .npy token file")
    if a.continue_steps and a.epochs != 10:
        print("depthaudit: note: --epochs is not used by --family hf (--continue-steps sets the training)",
              file=sys.stderr)
    bs = a.batch_size or 8  # 8 windows of --context tokens: fits a CPU, and a GPU for the larger Pythias
    imp = None if a.importance is None else tuple(sorted(set(a.importance or (1, 2, 4, 8))))
    if imp is not None and (min(imp) < 1 or a.bootstrap < 1):
        raise UsageError("--importance N values must be >= 1 (blocks removed at once) and --bootstrap >= 1")
    if a.grow_steps < 0 or a.grow_lr <= 0:
        raise UsageError("--grow-steps must be >= 0 and --grow-lr > 0")
    from ..models.gguf import check_gguf, is_gguf
    from ..models.hf import check_hf

    for m in a.model:  # a bad .gguf or an unloadable model is one line before the store is claimed: nothing written
        if is_gguf(m):
            check_gguf(m, a.revision)
        else:
            check_hf(m, a.revision)
    specs = [RunSpec(m, PretrainedRun(m, a.revision, a.text, a.context, a.continue_steps, a.continue_lr, bs,
                                      a.analysis_batches, a.low_signal, 4, a.seed, device, imp, a.bootstrap,
                                      a.grow_steps, a.grow_lr, a.grow_train),
                     runner=run_pretrained)
             for m in dict.fromkeys(a.model)]
    out = Path(a.out)
    text_name = Path(a.text).stem if a.text else "pydoc"
    ident = {"family": "hf", "data": text_name, "text": a.text, "revision": a.revision, "context": a.context,
             "continue_steps": a.continue_steps, "continue_lr": a.continue_lr, "batch_size": bs, "seed": a.seed,
             "analysis_batches": a.analysis_batches}
    if imp is not None:  # (absent without --importance: earlier files stay the same file)
        ident.update(importance=list(imp), bootstrap=a.bootstrap)
    if a.grow_steps:
        ident.update(grow_steps=a.grow_steps, grow_lr=a.grow_lr, grow_train=a.grow_train)
    store = FileStore(out / f"saturation_hf_{text_name}.json", "depthaudit.saturation.v1", ident,
                      defaults=dict.fromkeys(("importance", "bootstrap", "grow_steps", "grow_lr", "grow_train")))
    opts = sweep_options(a, out, device)
    if opts.cell is not None:
        opts = remember_sweep(opts, out, argv)
    run_sweep(specs, store, argv=["depthaudit", *argv], opts=opts)
    if imp is not None or a.grow_steps:
        from ..report.pretrained import write_importance

        write_importance(store)
    return _write_saturation(store, a.low_signal)


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
    method, d_hidden = family_method(a, "grow")
    a.batch_size = a.batch_size or 128
    data = load_data(a.dataset, a.data_dir, a.download, torch.device(device))
    if a.family == "resnet" and len(data.input_shape) != 3:
        raise UsageError(f"grow trains ResNet-CIFAR on images; {a.dataset} is not an image dataset "
                         "(--family resmlp takes any dataset)")
    specs = [RunSpec(arm, GrowRun(arm, a.dataset, a.data_dir, a.extra, a.epochs, sched, a.batch_size, a.lr,
                                  a.weight_decay, a.seed, device, a.family, method, a.arch, d_hidden or 256,
                                  a.base_blocks, a.base_width),
                     runner=run_arm) for arm in ("grown", "scratch")]
    ident = {"dataset": a.dataset, "data_sha256": data.sha256, "extra": a.extra, "epochs": a.epochs,
             "insert_at": list(sched), "seed": a.seed}
    name = f"resnet8+{a.extra}"
    if a.family == "resnet" and a.base_width != 16:
        ident["base_width"] = a.base_width
    if a.family == "resmlp":
        check_recipe(specs[1].cfg.recipe(), data)
        ident.update(family="resmlp", arch=a.arch, d_hidden=d_hidden, base_blocks=a.base_blocks, method=method)
        name = f"{a.arch}{a.base_blocks}+{a.extra}_{slug(method)}"
    out = Path(a.out)
    store = FileStore(out / f"grow_{name}_{a.dataset}.json", "depthaudit.grow.v1", ident)
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    opts = sweep_options(a, out, device)
    if opts.cell is not None:
        opts = remember_sweep(opts, out, argv)
    run_sweep(specs, store, data=data if a.jobs == 1 else None, argv=["depthaudit", *argv], run_log=log, opts=opts)
    table = grow_md(store.doc)
    grow_figure(store.doc, store.path.with_suffix(".png"))
    write_text(store.path.with_suffix(".md"), f"# {grow_title(store.doc)}\n\n{table}\n\n"
               f"![grow]({store.path.with_suffix('.png').name})\n")
    print(table)
    print(f"\nwrote {store.path}, its .md and .png")
    return 0


def family_method(a: argparse.Namespace, command: str) -> tuple[str | None, int | None]:
    """``(method spec, width)`` of the family: resnet/gpt train with plain backprop, resmlp under ``--method``."""
    from ..methods import METHODS

    if a.family != "resmlp":
        if a.method is not None:
            raise UsageError(f"--method {a.method}: the {a.family} family trains with plain backprop (a credit method "
                             f"needs one residual stream); use {command} --family resmlp --method {a.method}")
        return None, (a.d_hidden or 64) if a.family == "gpt" else a.d_hidden
    from ..methods import parse_spec

    method = str(parse_spec(a.method or "bp"))  # a misspelt method or option: one line naming the known ones
    if command == "grow" and not METHODS.get(method.partition(":")[0]).growable:
        able = ", ".join(n for n in METHODS.names() if METHODS.get(n).growable)
        raise UsageError(f"--method {method}: its state is built for a fixed depth and cannot grow; use one of {able}")
    return method, a.d_hidden or 256


def check_recipe(cfg, data) -> None:
    """Build the model and method once on the CPU so an incompatible pair fails here, before any training."""
    from dataclasses import replace

    from ..loop import build

    build(replace(cfg, device="cpu"), data)  # reads only the data's shapes


def slug(spec: str) -> str:
    """A method spec as a file-name part (``fa-stream:identity`` → ``fa-stream-identity``)."""
    return spec.replace(":", "-").replace("=", "").replace(",", "-")


def family_args(p) -> None:
    """``--method`` and ``--arch`` of the resmlp family (depth under a credit method); ``--base-width`` of resnet."""
    from ..models import MODELS

    p.add_argument("--base-width", type=int, default=16, metavar="W",
                   help="resnet: stage widths W, 2W, 4W (default: 16; the paper's ImageNet-100 runs use 32)")
    p.add_argument("--method", default=None, metavar="SPEC",
                   help="resmlp: credit method, any registered one with options, e.g. fa, dfa, fa-stream:identity "
                   "(default: bp)")
    p.add_argument("--arch", default="resmlp", choices=MODELS.names(),
                   help="resmlp: the residual model (default: resmlp)")


def register(sub) -> None:
    """Add this module's subcommands to the CLI's subparsers (each with its own flags and ``func``)."""
    sa = sub.add_parser("saturation", help=COMMANDS["saturation"][1],
                        description="Train ResNet-8 + N (or a GPT decoder of base + N blocks) for each --extra N "
                        "(plain backprop), then measure AG_l, AGmax, the growth value V_l and the gradient-matched "
                        "insertion's loss change at every candidate.")
    sa.add_argument("--family", choices=["resnet", "gpt", "resmlp", "hf"], default="resnet",
                    help="resnet | gpt (plain backprop) | resmlp (under --method) | hf (pretrained; default: resnet)")
    family_args(sa)
    sa.add_argument("--model", nargs="+", default=None, metavar="NAME",
                    help="hf: Hub names or local folders of causal LMs (needs depthaudit[hf])")
    sa.add_argument("--revision", default=None, metavar="REV", help="hf: model revision, e.g. step143000")
    sa.add_argument("--continue-steps", type=int, default=0, metavar="N",
                    help="hf: continue pretraining N AdamW steps on --text first (default: 0)")
    sa.add_argument("--continue-lr", type=float, default=1e-5, metavar="X", help="hf: its lr (default: 1e-5)")
    sa.add_argument("--importance", nargs="*", type=int, default=None, metavar="N",
                    help="hf: also Block Influence, angular distance l->l+N and the measured loss of removing each "
                    "block and each N-block set a rule prunes, beside AG and V (default N: 1 2 4 8)")
    sa.add_argument("--bootstrap", type=int, default=1000, metavar="R",
                    help="hf --importance: bootstrap resamples of the windows for the rank correlations "
                    "(default: 1000)")
    sa.add_argument("--grow-steps", type=int, default=0, metavar="N",
                    help="hf: insert the zero block at the highest-V and at the lowest-V boundary and train each, and "
                    "the model without insertion, N steps on --text (default: 0, off)")
    sa.add_argument("--grow-lr", type=float, default=1e-3, metavar="X",
                    help="hf --grow-steps: the new block's lr (default: 1e-3); the model's is --continue-lr")
    sa.add_argument("--grow-train", choices=["all", "block"], default="all",
                    help="hf --grow-steps: train the pretrained weights too, or only the new block (default: all)")
    sa.add_argument("--text", default=None, metavar="FILE",
                    help="gpt: UTF-8 text or .npy tokens (default: the embedded text, no download)")
    sa.add_argument("--context", type=int, default=64, metavar="T", help="gpt: context length (default: 64)")
    sa.add_argument("--d-hidden", type=int, default=None, metavar="N", help="gpt, resmlp: width (default: 64, 256)")
    sa.add_argument("--base-blocks", type=int, default=1, metavar="N",
                    help="gpt, resmlp: blocks before the extras (default: 1)")
    sa.add_argument("--extra", nargs="+", type=int, default=[0, 1, 2, 3, 6], metavar="N",
                    help="extra blocks N added to ResNet-8 (default: 0 1 2 3 6)")
    sa.add_argument("--analysis-batches", type=int, default=4, metavar="B", help="analysis batches (default: 4)")
    sa.add_argument("--low-signal", type=float, default=5e-3, metavar="X", help="AGmax flag level (default: 5e-3)")
    sa.add_argument("--analysis-split", choices=["test", "train"], default="test",
                    help="where AG is measured: held out (never fitted on) or training batches (default: test)")
    sa.add_argument("--delta", type=float, default=None, metavar="X",
                    help="separated test: δ of H0 Γ ≤ δ (default: --low-signal)")
    sa.add_argument("--margin", type=float, default=None, metavar="T",
                    help="separated test: t, decided at AGmax > δ + t (default: 2 standard errors, ours)")
    sa.add_argument("--alpha", type=float, default=1e-3, metavar="X",
                    help="gradient-matched insertion: fit the new block to -α·g (default: 1e-3)")
    plain_args(sa, "results/saturation")
    sa.set_defaults(func=cmd_saturation)

    gr = sub.add_parser("grow", help=COMMANDS["grow"][1],
                        description="Grow ResNet-8 to ResNet-8 + N by zero-output insertions during training and "
                        "compare final train/test loss with ResNet-8 + N trained from scratch for the same budget.")
    gr.add_argument("--family", choices=["resnet", "resmlp"], default="resnet",
                    help="resnet (plain backprop) | resmlp (under --method) (default: resnet)")
    family_args(gr)
    gr.add_argument("--d-hidden", type=int, default=None, metavar="N", help="resmlp: width (default: 256)")
    gr.add_argument("--base-blocks", type=int, default=1, metavar="N", help="resmlp: blocks to start from (default: 1)")
    gr.add_argument("--extra", type=int, default=3, metavar="N", help="blocks to grow (default: 3)")
    gr.add_argument("--insert-at", nargs="+", type=int, default=None, metavar="E",
                    help="epoch of each insertion (default: evenly over the first half)")
    plain_args(gr, "results/grow")
    gr.set_defaults(func=cmd_grow)
