"""`depthaudit train`: one run under one credit method."""

# imports inside functions: torch-loading modules are imported inside functions: `depthaudit --help` loads no torch
import argparse
from pathlib import Path

from . import COMMANDS
from .args import add_train_args, config_from_args, out_arg


def cmd_train(a: argparse.Namespace, argv: list[str]) -> int:
    """Train one run (:func:`depthaudit.train`) and write ``OUT/result.json`` (+ ``checkpoint.pt``)."""
    from .. import api

    cfg = config_from_args(a, zero_epochs=True)
    from ..runner import run_slug

    # the default names the whole configuration, as an audit's run folders do (readable part + a hash of it all):
    # two configurations never share it (walk 15 case 211: fa and fa:head=exact, or two lrs, collided)
    out = Path(a.out or f"runs/{run_slug(cfg)}")
    res = api.train(cfg, out, checkpoint=not a.no_checkpoint, force=a.force, argv=["depthaudit", *argv])
    print(res.card)
    return 0


def register(sub) -> None:
    """Add this module's subcommands to the CLI's subparsers (each with its own flags and ``func``)."""
    t = sub.add_parser("train", help=COMMANDS["train"][1],
                       description="Train one residual model under one credit method (SPEC §2 recipe).")
    add_train_args(t)
    g = t.group("output")
    out_arg(g, None, "output folder (default: runs/<config>_<hash of the whole config>)")
    g.add_argument("--force", action="store_true", help="overwrite an existing result.json")
    g.add_argument("--no-checkpoint", "--no_checkpoint", dest="no_checkpoint", action="store_true", advanced=True,
                   help="do not write checkpoint.pt (weights + feedback)")
    t.set_defaults(func=cmd_train)
