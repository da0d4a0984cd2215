"""Watching runs live where researchers watch them: TensorBoard and Weights & Biases (optional extras).

One logger per run, fed after every epoch with that epoch's record (losses, accuracy and, when the epoch
was measured, ρ, ‖g_L‖ and the per-layer cosines); the run's config goes in as hyperparameters. The JSON
stores stay the source of truth: a logger only mirrors them. ``pip install "depthaudit[tensorboard]"`` /
``"depthaudit[wandb]"``; a missing one is one line naming the install. W&B honours ``WANDB_MODE``
(``offline`` writes under ``--log-dir`` without an account; the tests use it).
"""

# imports inside functions: tensorboard and wandb are optional extras, imported by the log that uses them
import math
import re
from pathlib import Path

from .diagnostics.base import MEASUREMENT_KEY, registered
from .errors import UsageError


def epoch_scalars(rec: dict) -> dict[str, float]:
    """The scalars of one epoch record, by tag: ``train/loss``, ``test/acc``, ``audit/rho``, ``cosine/l2``, etc.

    The measured ones come from every registered diagnostic (:meth:`Diagnostic.scalars`) that the epoch measured.
    """
    out = {"train/loss": rec.get("train_loss"), "test/loss": rec.get("test_loss"), "test/acc": rec.get("test_acc"),
           "train/lr": rec.get("lr_end")}
    measured = rec.get(MEASUREMENT_KEY) or {}
    for cls in registered():
        if cls.name in measured:
            out.update(cls.scalars(cls.read(measured)))
    return {k: float(v) for k, v in out.items() if isinstance(v, int | float) and math.isfinite(v)}


def _hparams(config: dict) -> dict:
    """Config values TensorBoard/W&B accept as hyperparameters (numbers, strings, booleans)."""
    return {k: (v if isinstance(v, int | float | str | bool) else str(v)) for k, v in config.items()}


class TensorBoardLog:
    """A ``SummaryWriter`` per run under ``<log_dir>/tensorboard/<run>``."""

    def __init__(self, log_dir: str, name: str, config: dict):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise UsageError('--log tensorboard needs TensorBoard: pip install "depthaudit[tensorboard]"') from None
        self.config = config
        self.writer = SummaryWriter(str(Path(log_dir) / "tensorboard" / name))

    def epoch(self, rec: dict) -> None:
        """Write one epoch's scalars at step = epoch."""
        for tag, v in epoch_scalars(rec).items():
            self.writer.add_scalar(tag, v, rec["epoch"])
        self.writer.flush()

    def close(self, status: str, final: dict) -> None:
        """The run's config as hparams with its final accuracy and loss; close the writer."""
        metrics = {f"final/{k}": float(v) for k, v in final.items()
                   if k in ("test_acc", "test_loss") and isinstance(v, int | float) and math.isfinite(v)}
        self.writer.add_hparams(_hparams(self.config), metrics or {"final/test_acc": float("nan")}, run_name=".")
        self.writer.close()


class WandbLog:
    """One W&B run per training, grouped by sweep."""

    def __init__(self, log_dir: str, name: str, config: dict, group: str):
        try:
            import wandb
        except ImportError:
            raise UsageError('--log wandb needs Weights & Biases: pip install "depthaudit[wandb]"') from None
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        try:
            self.run = wandb.init(project="depthaudit", group=group, name=name, config=config, dir=log_dir,
                                  reinit="create_new")
        except Exception as exc:  # W&B's own refusal (no API key, no network): one line, not a traceback
            if not type(exc).__module__.startswith("wandb"):
                raise
            raise UsageError(f"--log wandb: W&B could not start a run ({_first(exc)}); {WANDB_FIX}") from None

    def epoch(self, rec: dict) -> None:
        """Log one epoch's scalars at step = epoch."""
        self.run.log(epoch_scalars(rec), step=rec["epoch"])

    def close(self, status: str, final: dict) -> None:
        """Summary (status, final figures) and finish."""
        self.run.summary["status"] = status
        for k, v in final.items():
            if isinstance(v, int | float):
                self.run.summary[f"final/{k}"] = v
        self.run.finish()


class Watch:
    """Every logger asked for, for one run: ``epoch(rec)`` after each epoch, ``close(status, final)`` at the end."""

    def __init__(self, loggers: list):
        self.loggers = loggers

    def epoch(self, rec: dict) -> None:
        """Mirror one epoch to every logger."""
        for lg in self.loggers:
            lg.epoch(rec)

    def close(self, status: str, final: dict) -> None:
        """Close every logger."""
        for lg in self.loggers:
            lg.close(status, final)


WANDB_FIX = "run `wandb login` (or set WANDB_API_KEY), or set WANDB_MODE=offline to log to files only"


def _first(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]


def check_loggers(kinds, log_dir: str | None = None) -> None:
    """Refuse, before any folder is claimed, a logger that cannot start (extra, W&B login, ``--log-dir``)."""
    import os

    from .io import check_output_dir

    if kinds and log_dir is not None:
        check_output_dir(log_dir, "--log-dir")
    for kind in kinds or ():
        if kind == "tensorboard":
            try:
                import torch.utils.tensorboard  # noqa: F401  (the extra's presence, nothing more)
            except ImportError:
                raise UsageError('--log tensorboard needs TensorBoard: pip install "depthaudit[tensorboard]"') from None
        elif kind == "wandb":
            try:
                import wandb  # noqa: F401
            except ImportError:
                raise UsageError('--log wandb needs Weights & Biases: pip install "depthaudit[wandb]"') from None
            if os.environ.get("WANDB_MODE", "").lower() in ("offline", "disabled", "dryrun") \
                    or os.environ.get("WANDB_API_KEY"):
                continue
            import netrc
            from urllib.parse import urlparse

            host = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname
            try:
                known = netrc.netrc().authenticators(host) is not None  # where `wandb login` keeps the key
            except (OSError, netrc.NetrcParseError):
                known = False
            if not known:
                raise UsageError(f"--log wandb: no W&B API key found for {host}; {WANDB_FIX}")


def make_watch(kinds, log_dir: str | None, key: str, config: dict, group: str) -> Watch | None:
    """A :class:`Watch` for one run (named after its sweep key), or None when nothing is logged."""
    if not kinds:
        return None
    name = re.sub(r"[^A-Za-z0-9_.=-]+", "_", key).strip("_") or "run"
    log_dir = log_dir or "logs"
    loggers = []
    for kind in kinds:
        if kind == "tensorboard":
            loggers.append(TensorBoardLog(log_dir, name, config))
        elif kind == "wandb":
            loggers.append(WandbLog(log_dir, name, config, group))
        else:
            raise UsageError(f"--log {kind!r} not known; use tensorboard or wandb")
    return Watch(loggers)
