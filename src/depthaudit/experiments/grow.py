"""``depthaudit grow``: function-preserving growth of ResNet-CIFAR vs the same final architecture from scratch.

Growth starts from ResNet-8 and, at the start of each epoch in the schedule, inserts extra block i at
the end of stage i mod 3 with its branch's last BatchNorm at γ = β = 0: the network's function is
unchanged (to the bit in eval mode; train-mode BN also gives an exactly zero branch). The new block's
parameters join the optimizer as a new group; existing parameters keep their optimizer state. The
final architecture is exactly ResNet-8 + N, which the scratch arm trains for the same number of epochs
and steps (same data order, schedule and optimizer).

The ``resmlp`` family (any registered residual model, default the reference ResMLP) grows from
``base_blocks`` to ``base_blocks + extra`` **under a credit method** with the audit's recipe: each new block
is :func:`depthaudit.depth.insert.zero_block` (output projection at 0, the same tangent space V measures),
inserted on top of the stream (after the last block, before the readout); its parameters join the
optimizer as a new group and the method keeps every existing feedback, drawing the new block's
(:meth:`depthaudit.methods.CreditMethod.grown`). Both arms train through the one loop.
"""

import time
from dataclasses import dataclass

import torch

from ..config import TrainConfig, resolve_device
from ..data import load_data
from ..fields import arg, check_ranges, check_types, like, refuse
from ..methods import parse_method_spec
from .cell import Cell
from .families import FAMILIES
from .saturation import (
    SaturationConfig,
    adamw_unsaid,
    family_batches,
    family_help,
    family_names,
    family_widths,
    resolve_budget,
    resolve_optimizer,
)


@dataclass(frozen=True, kw_only=True)
class GrowConfig:
    """Growth vs scratch (``depthaudit grow``): base → base + ``extra`` blocks, against the same from scratch.

    Every field is also the command's flag; the fields ``saturation`` shares are :class:`SaturationConfig`'s
    declarations (one default, help and range each). The grown arm inserts zero-output blocks at the epochs
    ``insert_at`` (None: evenly over the first half).

    ``family``: a growable key of :data:`~depthaudit.experiments.families.FAMILIES` (``resnet``: ResNet-8 + N,
    plain backprop; ``resmlp``: ``arch`` under ``method``, the audit's recipe). ``None`` fields take the family's
    default (``batch_size`` 128, ``d_hidden`` 256, ``method`` ``bp`` for resmlp); ``epochs`` ``None`` is the
    dataset's budget.
    """

    family: str = like(SaturationConfig, "family", help=family_help(growable=True),
                       choices=family_names(growable=True))
    extra: int = arg(3, help="blocks to grow", lo=1)
    insert_at: tuple[int, ...] | None = arg(None, help="epoch at whose start each block is inserted (and trains on)",
                                            lo=1, metavar="E", repeats=True,
                                            default_text="evenly over the first half")
    # the model (saturation's declarations)
    arch: str = like(SaturationConfig, "arch")
    method: str | None = like(SaturationConfig, "method")
    d_hidden: int | None = like(SaturationConfig, "d_hidden", help="resmlp: width",
                                   default_text=family_widths(growable=True))
    base_blocks: int = like(SaturationConfig, "base_blocks", help="resmlp: blocks to start from")
    base_width: int = like(SaturationConfig, "base_width")
    # data and the recipe
    dataset: str = like(SaturationConfig, "dataset")
    data_dir: str | None = like(SaturationConfig, "data_dir")
    download: bool = like(SaturationConfig, "download")
    epochs: int | None = like(SaturationConfig, "epochs", default_text="the dataset's; CIFAR 100, others 20")
    stop_after: int | None = like(SaturationConfig, "stop_after")
    batch_size: int | None = like(SaturationConfig, "batch_size", default_text=family_batches(growable=True))
    optimizer: str = like(SaturationConfig, "optimizer")
    lr: float | None = like(SaturationConfig, "lr")
    weight_decay: float | None = like(SaturationConfig, "weight_decay")
    seed: int = like(SaturationConfig, "seed")
    device: str = like(SaturationConfig, "device")

    def __post_init__(self):
        if self.insert_at is not None:
            object.__setattr__(self, "insert_at", tuple(self.insert_at))
        check_types(self)  # extra='3', 3.5 or True: refused here, not deep inside torch
        object.__setattr__(self, "device", resolve_device(self.device))
        check_ranges(self)  # every field's declared range (the CLI's parser applies the same ones)
        if self.family not in FAMILIES:  # a ConfigError like every other refused value (the CLI lists the choices)
            raise refuse(self, f"{{family={self.family!r}}}: unknown depth family; choose one of: "
                               f"{', '.join(n for n in FAMILIES.names() if FAMILIES.get(n).growable)}")
        if not FAMILIES.get(self.family).uses_base_width:  # (a ResNet-only value: held at its default, so it names
            object.__setattr__(self, "base_width", 16)  # no other run of this family)
        if not FAMILIES.get(self.family).uses_arch:  # (resnet builds its own model: --arch, held, names no other run)
            object.__setattr__(self, "arch", type(self).__dataclass_fields__["arch"].default)
        if not FAMILIES.get(self.family).growable:
            able = ", ".join(n for n in FAMILIES.names() if FAMILIES.get(n).growable)
            raise refuse(self, f"{{family}} {self.family}: grow cannot grow it; use one of {able}")
        resolve_optimizer(self, "grow")
        FAMILIES.get(self.family).checked_method(self, "grow")  # a misspelt or ungrowable method: refused here
        resolve_budget(self)
        if self.epochs < 1:
            raise refuse(self, "{epochs} must be >= 1 for grow (insertions happen at epoch starts)")
        sched = self.schedule()
        last = self.stop_after or self.epochs  # stop_after: the first epochs of the same run, insertions included
        if len(sched) != self.extra or any(not 1 <= e <= last for e in sched) or list(sched) != sorted(sched):
            raise refuse(self, f"{{insert_at}} needs {self.extra} non-decreasing epochs in 1..{last} (one per extra "
                         "block)" + ("" if self.insert_at else f"; the default schedule {list(sched)} reaches past "
                                     "{stop_after}"))

    def schedule(self) -> tuple[int, ...]:
        """The insertion epochs (given, or :func:`default_schedule`)."""
        return self.insert_at if self.insert_at else default_schedule(self.extra, self.epochs)

    def arm(self, arm: str) -> "GrowRun":
        """The run of one arm, ``grown`` or ``scratch`` (the one place a :class:`GrowRun` is built from a config)."""
        return GrowRun(config=self, arm=arm, insert_at=self.schedule())


@dataclass(frozen=True, kw_only=True)
class GrowRun(Cell):
    """One arm: ``grown`` or ``scratch``, with the config's insertion schedule (every other value: its config)."""

    arm: str
    insert_at: tuple[int, ...]
    KEYS = ("arm", "dataset", "data_dir", "extra", "epochs", "insert_at", "batch_size", "lr", "weight_decay", "seed",
            "device", "family", "method", "arch", "d_hidden", "base_blocks", "base_width", "stop_after", "optimizer")

    def to_dict(self) -> dict:
        """JSON-able."""
        return adamw_unsaid({**super().to_dict(), "insert_at": list(self.insert_at)})

    def describe(self) -> str:
        """One line for listings: the arm and the architecture."""
        return FAMILIES.get(self.family).describe(self)

    def same_as(self, stored: dict) -> bool:
        """Equality with a stored config (one stored before the families existed was a ResNet arm)."""
        legacy = {"family": "resnet", "method": None, "arch": "resmlp", "d_hidden": 256, "base_blocks": 1,
                  "base_width": 16, "stop_after": None}
        return {**legacy, **stored} == self.to_dict()

    def recipe(self):
        """Resmlp family: this arm's recipe run config (grown: starts at ``base_blocks``)."""
        blocks = self.base_blocks + (0 if self.arm == "grown" else self.extra)
        base = TrainConfig(dataset=self.dataset, data_dir=self.data_dir, arch=self.arch, d_hidden=self.d_hidden,
                           num_blocks=blocks, epochs=self.epochs, stop_after=self.stop_after,
                           batch_size=self.batch_size, lr=self.lr, optimizer=self.optimizer,
                           weight_decay=self.weight_decay, seed=self.seed, device=self.device)
        return parse_method_spec(self.method or "bp", base)[1]


def default_schedule(extra: int, epochs: int) -> tuple[int, ...]:
    """Insert the N blocks at evenly spaced epochs within the first half of training (epochs are 1-based)."""
    half = max(1, epochs // 2)
    return tuple(1 + (i * half) // max(1, extra) for i in range(extra))


def run_arm(spec, data=None, log=None, argv=None) -> dict:
    """Train one arm and return its record (per-epoch test accuracy/loss, final train loss): the family's grow_arm."""
    cfg: GrowRun = spec.cfg
    device = torch.device(cfg.device)
    if data is None:
        data = load_data(cfg.dataset, cfg.data_dir, False, device, fingerprint=False)
    t0 = time.perf_counter()
    return FAMILIES.get(cfg.family).grow_arm(cfg, data, log, argv, t0)
