"""Command-line interface: ``depthaudit train …``. Every choice list is a registry's keys."""

import argparse
import importlib
import sys
from pathlib import Path

import torch

from . import __version__
from .config import TrainConfig
from .errors import UsageError

DEFAULTS = TrainConfig()


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line (exit 2), not a usage dump."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _flag(group, name: str, **kw):
    """Add ``--name-with-dashes`` and its ``--name_with_underscores`` spelling (the seed harness's)."""
    dashed = "--" + name.replace("_", "-")
    spellings = [dashed] if "_" not in name else [dashed, "--" + name]
    if "default" in kw and "help" in kw:
        kw["help"] += " (default: %(default)s)"
    group.add_argument(*spellings, dest=name, **kw)


def add_train_args(p: argparse.ArgumentParser) -> None:
    """Flags shared by every command that trains."""
    from .data import DATASETS
    from .methods import METHODS
    from .models import MODELS

    g = p.add_argument_group("data")
    _flag(g, "dataset", default=DEFAULTS.dataset, choices=DATASETS.names(), help="dataset")
    _flag(g, "data_dir", default=None, help="folder or .zip holding the data (cifar*)")
    _flag(g, "download", action="store_true", help="download a missing CIFAR archive (verified by md5)")
    g = p.add_argument_group("model")
    _flag(g, "arch", default=DEFAULTS.arch, choices=MODELS.names(), help="residual model")
    _flag(g, "d_hidden", type=int, default=DEFAULTS.d_hidden, help="stream width d")
    _flag(g, "num_blocks", type=int, default=DEFAULTS.num_blocks, help="residual blocks L")
    _flag(g, "mlp_ratio", type=int, default=DEFAULTS.mlp_ratio, help="MLP expansion")
    g = p.add_argument_group("credit and recipe")
    _flag(g, "method", default=DEFAULTS.method, choices=METHODS.names(), help="credit method")
    _flag(g, "train_blocks", default=DEFAULTS.train_blocks, help="all | none | last:k | first:k")
    _flag(g, "epochs", type=int, default=DEFAULTS.epochs, help="epochs")
    _flag(g, "batch_size", type=int, default=DEFAULTS.batch_size, help="batch size")
    _flag(g, "lr", type=float, default=DEFAULTS.lr, help="AdamW learning rate (cosine to 0)")
    _flag(g, "weight_decay", type=float, default=DEFAULTS.weight_decay, help="AdamW weight decay")
    _flag(g, "scale_penalty", type=float, default=DEFAULTS.scale_penalty, help="λ on ‖f‖²/‖h‖²")
    _flag(g, "seed", type=int, default=DEFAULTS.seed, help="seed (init, feedback, shuffle)")
    _flag(g, "device", default="auto", help="cpu | cuda | cuda:N | auto = cuda if available")


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


def config_from_args(a: argparse.Namespace) -> TrainConfig:
    """The frozen config, built once here and passed down."""
    return TrainConfig(
        dataset=a.dataset, data_dir=a.data_dir, download=a.download, arch=a.arch, d_hidden=a.d_hidden,
        num_blocks=a.num_blocks, mlp_ratio=a.mlp_ratio, method=a.method, train_blocks=a.train_blocks,
        epochs=a.epochs, batch_size=a.batch_size, lr=a.lr, weight_decay=a.weight_decay,
        scale_penalty=a.scale_penalty, seed=a.seed, device=resolve_device(a.device))


def cmd_train(a: argparse.Namespace, argv: list[str]) -> int:
    """Train one run and write ``OUT/result.json`` (+ ``checkpoint.pt``)."""
    from .data import load_data
    from .runner import result_record, save_run
    from .train import train

    cfg = config_from_args(a)
    out = Path(a.out or f"runs/{cfg.dataset}_{cfg.arch}_d{cfg.d_hidden}_L{cfg.num_blocks}_{cfg.method}_"
                         f"{cfg.train_blocks.replace(':', '')}_s{cfg.seed}")
    if (out / "result.json").exists() and not a.force:
        raise UsageError(f"{out}/result.json already exists; pass --force to overwrite or choose another --out")
    data = load_data(cfg.dataset, cfg.data_dir, cfg.download, torch.device(cfg.device))  # validates data
    print(f"depthaudit train: {cfg.method} on {cfg.arch} d={cfg.d_hidden} L={cfg.num_blocks} "
          f"train_blocks={cfg.train_blocks}, {cfg.dataset} ({data.x_train.shape[0]} train), "
          f"{cfg.epochs} epochs on {cfg.device}", file=sys.stderr)
    run = train(cfg, data)
    save_run(out, result_record(cfg, data, run, ["depthaudit", *argv]), run, checkpoint=not a.no_checkpoint)
    print(f"{run.status}: final test_acc {run.final['test_acc']}  → {out / 'result.json'}")
    return 0


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
    t.set_defaults(func=cmd_train)
    return p


def _import_plugins(argv: list[str]) -> None:
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
        return args.func(args, argv)
    except UsageError as exc:
        print(f"depthaudit: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("depthaudit: interrupted; nothing half-written was left", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
