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
from dataclasses import asdict, dataclass, fields

import torch

from .families import FAMILIES


@dataclass(frozen=True, kw_only=True)
class GrowConfig:
    """Growth vs scratch (``depthaudit grow``): base → base + ``extra`` blocks, against the same from scratch.

    The grown arm inserts zero-output blocks at the epochs ``insert_at`` (None: evenly over the first half).

    ``family``: a growable key of :data:`~depthaudit.experiments.families.FAMILIES` (``resnet``: ResNet-8 + N,
    plain backprop; ``resmlp``: ``arch`` under ``method``, the audit's recipe). ``None`` fields take the family's
    default (``batch_size`` 128, ``d_hidden`` 256, ``method`` ``bp`` for resmlp).
    """

    family: str = "resnet"
    dataset: str = "cifar10"
    data_dir: str | None = None
    download: bool = False
    extra: int = 3
    epochs: int | None = None  # the budget the schedule spans; None = the dataset's (text: DEFAULT_EPOCHS)
    insert_at: tuple[int, ...] | None = None
    batch_size: int | None = None
    lr: float = 1e-3
    weight_decay: float = 0.01
    seed: int = 42
    device: str = "cpu"
    method: str | None = None
    arch: str = "resmlp"
    d_hidden: int | None = None
    base_blocks: int = 1
    base_width: int = 16
    stop_after: int | None = None  # train only the first N epochs of the ``epochs`` budget's schedule

    def __post_init__(self):
        if self.insert_at is not None:
            object.__setattr__(self, "insert_at", tuple(self.insert_at))

    def schedule(self) -> tuple[int, ...]:
        """The insertion epochs (given, or :func:`default_schedule`)."""
        return self.insert_at if self.insert_at else default_schedule(self.extra, self.epochs)

    def arm(self, arm: str) -> "GrowRun":
        """The run of one arm, ``grown`` or ``scratch`` (the one place a :class:`GrowRun` is built from a config)."""
        shared = {f.name: getattr(self, f.name) for f in fields(GrowRun) if f.name not in ("arm", "insert_at")}
        return GrowRun(arm=arm, insert_at=self.schedule(), **shared)


@dataclass(frozen=True, kw_only=True)
class GrowRun:
    """One arm: ``grown`` (schedule of insertion epochs) or ``scratch`` (keyword-only; :meth:`GrowConfig.arm`)."""

    arm: str
    dataset: str
    data_dir: str | None
    extra: int
    epochs: int
    insert_at: tuple[int, ...]
    batch_size: int = 128
    lr: float = 1e-3
    weight_decay: float = 0.01
    seed: int = 42
    device: str = "cpu"
    family: str = "resnet"  # a growable key of FAMILIES
    method: str | None = None
    arch: str = "resmlp"
    d_hidden: int = 256
    base_blocks: int = 1
    base_width: int = 16  # resnet: stage widths w, 2w, 4w
    stop_after: int | None = None  # train only the first N epochs of the ``epochs`` budget's schedule

    def to_dict(self) -> dict:
        """JSON-able."""
        d = asdict(self)
        d["insert_at"] = list(self.insert_at)
        return d

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
        from ..config import TrainConfig
        from ..methods import parse_method_spec

        blocks = self.base_blocks + (0 if self.arm == "grown" else self.extra)
        base = TrainConfig(dataset=self.dataset, data_dir=self.data_dir, arch=self.arch, d_hidden=self.d_hidden,
                           num_blocks=blocks, epochs=self.epochs, stop_after=self.stop_after,
                           batch_size=self.batch_size, lr=self.lr,
                           weight_decay=self.weight_decay, seed=self.seed, device=self.device)
        return parse_method_spec(self.method or "bp", base)[1]


def default_schedule(extra: int, epochs: int) -> tuple[int, ...]:
    """Insert the N blocks at evenly spaced epochs within the first half of training (epochs are 1-based)."""
    half = max(1, epochs // 2)
    return tuple(1 + (i * half) // max(1, extra) for i in range(extra))


def run_arm(spec, data=None, log=None, argv=None) -> dict:
    """Train one arm and return its record (per-epoch test accuracy/loss, final train loss): the family's grow_arm."""
    from ..data import load_data

    cfg: GrowRun = spec.cfg
    device = torch.device(cfg.device)
    if data is None:
        data = load_data(cfg.dataset, cfg.data_dir, False, device)
    t0 = time.perf_counter()
    return FAMILIES.get(cfg.family).grow_arm(cfg, data, log, argv, t0)
