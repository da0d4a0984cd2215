"""`depthaudit train`: one run under one credit method."""

import argparse
import sys
from pathlib import Path

import torch

from ..errors import UsageError
from ..io import check_output_dir
from . import COMMANDS
from .args import add_train_args, config_from_args, out_arg


def cmd_train(a: argparse.Namespace, argv: list[str]) -> int:
    """Train one run and write ``OUT/result.json`` (+ ``checkpoint.pt``)."""
    from ..data import load_data
    from ..runner import result_record, save_run
    from ..train import train

    cfg = config_from_args(a, zero_epochs=True)
    out = Path(a.out or f"runs/{cfg.dataset}_{cfg.arch}_d{cfg.d_hidden}_L{cfg.num_blocks}_{cfg.method}_"
                         f"{cfg.train_blocks.replace(':', '')}_s{cfg.seed}")
    check_output_dir(out)
    if (out / "result.json").exists() and not a.force:
        raise UsageError(f"{out}/result.json already exists; pass --force to overwrite or choose another --out")
    if cfg.warm_start:  # a damaged checkpoint is refused before any work
        from ..train import read_checkpoint

        read_checkpoint(cfg.warm_start)
    data = load_data(cfg.dataset, cfg.data_dir, cfg.download, torch.device(cfg.device))  # validates data
    from ..train import Stepper, build

    Stepper(cfg, data, *build(cfg, data))  # model, warm start and augmentation fit the data: refused here, not later
    print(f"depthaudit train: {cfg.method} on {cfg.arch} d={cfg.d_hidden} L={cfg.num_blocks} "
          f"train_blocks={cfg.train_blocks}, {cfg.dataset} ({data.x_train.shape[0]} train), "
          f"{cfg.epochs} epochs on {cfg.device}", file=sys.stderr)
    run = train(cfg, data)
    save_run(out, result_record(cfg, data, run, ["depthaudit", *argv]), run, checkpoint=not a.no_checkpoint)
    print(f"{run.status}: final test_acc {run.final['test_acc']}  → {out / 'result.json'}")
    return 0


def register(sub) -> None:
    """Add this module's subcommands to the CLI's subparsers (each with its own flags and ``func``)."""
    t = sub.add_parser("train", help=COMMANDS["train"][1],
                       description="Train one residual model under one credit method (SPEC §2 recipe).")
    add_train_args(t)
    g = t.add_argument_group("output")
    out_arg(g, None, "output folder (default: runs/<config>)")
    g.add_argument("--force", action="store_true", help="overwrite an existing result.json")
    g.add_argument("--no-checkpoint", "--no_checkpoint", dest="no_checkpoint", action="store_true",
                   help="do not write checkpoint.pt (weights + feedback)")
    t.set_defaults(func=cmd_train)
