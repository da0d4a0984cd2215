"""The frozen run configuration: built once by the CLI, passed down, serialised into every result."""

import os
from dataclasses import asdict, dataclass, fields
from typing import Any

from .errors import UsageError


@dataclass(frozen=True)
class TrainConfig:
    """Everything that determines one training run (defaults = SPEC §2 audit recipe)."""

    # data
    dataset: str = "mnist1d"
    data_dir: str | None = None
    download: bool = False
    # model
    arch: str = "resmlp"
    d_hidden: int = 256
    num_blocks: int = 4
    mlp_ratio: int = 4
    # credit method and which blocks train
    method: str = "bp"
    train_blocks: str = "all"
    bridge_alpha: float | None = None  # Credit Bridge: mix the method's credit with BP's (see bridges)
    init_checkpoint: str | None = None  # State Bridge: start from this checkpoint's weights
    # recipe
    epochs: int = 20
    batch_size: int = 128
    lr: float = 1e-3
    weight_decay: float = 0.01
    scale_penalty: float = 0.0
    seed: int = 42
    device: str = "cpu"

    def __post_init__(self):
        for name in ("d_hidden", "num_blocks", "mlp_ratio", "epochs", "batch_size"):
            if getattr(self, name) < (0 if name in ("epochs", "num_blocks") else 1):
                raise UsageError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        if self.lr <= 0:
            raise UsageError(f"--lr must be > 0, got {self.lr}")
        if self.weight_decay < 0 or self.scale_penalty < 0:
            raise UsageError("--weight-decay and --scale-penalty must be >= 0")
        trainable_blocks(self.train_blocks, self.num_blocks)  # validates the spelling and k
        if self.init_checkpoint and not os.path.isfile(self.init_checkpoint):
            raise UsageError(f"--init-checkpoint {self.init_checkpoint}: no such file; give a checkpoint.pt path")
        if self.bridge_alpha is not None and not 0.0 <= self.bridge_alpha <= 1.0:
            raise UsageError(f"--bridge-alpha must be in [0, 1], got {self.bridge_alpha}")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict of every field."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrainConfig":
        """Inverse of :meth:`to_dict`; unknown keys are ignored (newer result files)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def same_as(self, stored: dict) -> bool:
        """Whether a config stored by any version (missing fields = their defaults) equals this one."""
        try:
            return TrainConfig.from_dict(stored) == self
        except (TypeError, UsageError):
            return False

    def trainable(self) -> tuple[int, ...]:
        """1-based indices of the blocks that train (see :func:`trainable_blocks`)."""
        return trainable_blocks(self.train_blocks, self.num_blocks)


def trainable_blocks(spec: str, num_blocks: int) -> tuple[int, ...]:
    """Parse ``all`` | ``none`` | ``last:k`` | ``first:k`` into 1-based block indices.

    Blocks are numbered 1..L from the embedding side, so ``last:k`` is the output-side k.
    """
    spec = spec.strip().lower()
    if spec == "all":
        return tuple(range(1, num_blocks + 1))
    if spec == "none":
        return ()
    kind, _, k = spec.partition(":")
    if kind in ("last", "first") and k.isdigit():
        k = int(k)
        if k > num_blocks:
            raise UsageError(
                f"--train-blocks {spec}: k={k} exceeds --num-blocks {num_blocks}; use k <= {num_blocks}"
            )
        if kind == "last":
            return tuple(range(num_blocks - k + 1, num_blocks + 1))
        return tuple(range(1, k + 1))
    raise UsageError(f"--train-blocks {spec!r} not understood; use all, none, last:k or first:k")


def derive_seed(seed: int, tag: str) -> int:
    """An independent 63-bit seed for one use of the run's seed (``"feedback"``, ``"shuffle"``, …).

    Model init uses ``seed`` itself; every other random stream is derived here so streams never
    share numbers (a feedback matrix must not repeat the embedding's weights).
    """
    import hashlib

    return int.from_bytes(hashlib.sha256(f"{seed}:{tag}".encode()).digest()[:8], "little") >> 1
