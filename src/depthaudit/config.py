"""The frozen run configuration: built once by the CLI, passed down, serialised into every result."""

import os
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from .errors import UsageError
from .seeds import derive_seed  # noqa: F401  (re-exported: its home before 0.3)


@dataclass(frozen=True)
class TrainConfig:
    """Everything that determines one training run (defaults = SPEC §2 audit recipe)."""

    # data
    dataset: str = "mnist1d"
    data_dir: str | None = None
    download: bool = False
    augment: str = "auto"  # auto = the dataset's default (CIFAR: crop+flip) | crop+flip | crop | flip | none
    # model
    arch: str = "resmlp"
    variant: str = "ref"  # ref = the published protocol's model | v0.1 = depthaudit 0.1's (ours)
    d_hidden: int = 256
    num_blocks: int = 4
    mlp_ratio: int | None = None  # None = the variant's own (ResMLP ref 1, v0.1 4; ViT 4)
    # credit method and which blocks train
    method: str = "bp"
    train_blocks: str = "all"
    credit_mix: float | None = None  # credit mix (ours): (1-α)·method credit + α·BP credit
    warm_start: str | None = None  # BP warm start (ours): start from this checkpoint's weights
    # the method's own options, every declared one resolved (its defaults filled in): see methods/options.py
    method_options: dict[str, Any] = field(default_factory=dict)
    # recipe
    epochs: int = 20  # the budget: the cosine schedule spans it
    stop_after: int | None = None  # train only the first N epochs of that schedule
    batch_size: int = 128
    lr: float = 1e-3
    weight_decay: float = 0.01
    scale_penalty: float = 0.0  # λ of the scale penalty
    penalty_form: str = "abs"  # abs = λ‖f‖² (the reference's) | rel = λ‖f‖²/‖h‖² (ours, 0.1's)
    seed: int = 42
    device: str = "cpu"

    def __post_init__(self):
        from .data.augment import AUGMENTS
        from .models.resmlp import DEFAULT_RATIO, VARIANTS

        if self.variant not in VARIANTS:
            raise UsageError(f"--variant {self.variant!r} not known; use one of {', '.join(VARIANTS)}")
        if self.mlp_ratio is None:  # resolved here so every stored config names the expansion it ran
            object.__setattr__(self, "mlp_ratio", 4 if self.arch == "vit" else DEFAULT_RATIO[self.variant])
        if self.augment == "auto":
            from .data import DATASETS

            object.__setattr__(self, "augment", DATASETS.meta(self.dataset).get("augment", "none"))
        if self.augment not in AUGMENTS:
            raise UsageError(f"--augment {self.augment!r} not known; use one of auto, {', '.join(AUGMENTS)}")
        if self.stop_after is not None and not 1 <= self.stop_after <= self.epochs:
            raise UsageError(f"--stop-after must be in 1..--epochs ({self.epochs}), got {self.stop_after}")
        for name in ("d_hidden", "num_blocks", "mlp_ratio", "epochs", "batch_size"):
            if getattr(self, name) < (0 if name in ("epochs", "num_blocks") else 1):
                raise UsageError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        if self.lr <= 0:
            raise UsageError(f"--lr must be > 0, got {self.lr}")
        if self.weight_decay < 0 or self.scale_penalty < 0:
            raise UsageError("--weight-decay and --scale-penalty must be >= 0")
        trainable_blocks(self.train_blocks, self.num_blocks)  # validates the spelling and k
        if self.warm_start and not os.path.isfile(self.warm_start):
            inside = os.path.join(self.warm_start, "checkpoint.pt")
            if os.path.isdir(self.warm_start):
                raise UsageError(f"--warm-start {self.warm_start}: is a folder; give the checkpoint file in it"
                                 + (f" ({inside})" if os.path.isfile(inside) else ""))
            raise UsageError(f"--warm-start {self.warm_start}: no such file; give a checkpoint.pt path")
        if self.penalty_form not in ("abs", "rel"):
            raise UsageError(f"--penalty-form {self.penalty_form!r} not known; use abs or rel")
        if self.scale_penalty == 0:  # the form of a zero penalty is meaningless: one canonical value
            object.__setattr__(self, "penalty_form", "abs")
        from .methods import METHODS
        from .methods.options import resolve

        # one place validates a method's options: the method's own declarations (types, ranges, choices)
        object.__setattr__(self, "method_options", resolve(
            self.method, METHODS.get(self.method), dict(self.method_options or {}),
            hint="; to switch methods use cfg.with_method(spec), which takes that method's own options"))
        if self.credit_mix is not None and not 0.0 <= self.credit_mix <= 1.0:
            raise UsageError(f"--credit-mix must be in [0, 1], got {self.credit_mix}")

    def with_method(self, spec: str) -> "TrainConfig":
        """This config running method ``spec`` (``"fa"``, ``"fa:head=exact"``) with that method's own options."""
        from .methods import parse_method_spec

        return parse_method_spec(spec, replace(self, method="bp", method_options={}))[1]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict of every field."""
        return asdict(self)

    def identity_dict(self) -> dict[str, Any]:
        """The dict that names this run in stores (folder hashes, file identities), stable across versions.

        Options that 0.2 kept as flat fields (``fa_head``, ``ep_beta``, …) are written back in that form, every
        one (at its default when this method does not read it), so runs stored before the options moved into
        ``method_options`` keep their names; only options without such a field stay under ``method_options``.
        """
        from .methods.specs import legacy_fields

        d = self.to_dict()
        opts = dict(d.pop("method_options"))
        flat = {f: default for f, (_, _, default) in legacy_fields().items()}
        for f, (_, key, _) in legacy_fields().items():
            if key in opts and _legacy_owner(self.method, f):
                flat[f] = opts.pop(key)
        order = list(d)  # 0.2's field order: the options stood after warm_start
        at = order.index("warm_start") + 1
        out = {k: d[k] for k in order[:at]} | flat | {k: d[k] for k in order[at:]}
        from .methods import METHODS
        from .methods.options import declared

        # an option with no 0.2 field names the run only when set away from its default (older names stay)
        decl = declared(METHODS.get(self.method)) if self.method in METHODS else {}
        opts = {k: v for k, v in opts.items() if k not in decl or v != decl[k].default}
        if opts:
            out["method_options"] = opts
        return out

    def describe(self) -> str:
        """One line for progress logs: method and trained blocks."""
        return f"{self.method}, train_blocks {self.train_blocks}"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrainConfig":
        """Inverse of :meth:`to_dict`; unknown keys are ignored (newer result files).

        A key missing from a stored config takes the value that version ran with (:data:`LEGACY`), not
        today's default: a 0.1 result reads as ``variant=v0.1, augment=none``, so it is never mistaken
        for (or reused as) a run of the reference model.
        """
        from .methods.specs import legacy_fields

        names = {f.name for f in fields(cls)}
        d = {RENAMED.get(k, k): v for k, v in d.items()}
        opts = dict(d.get("method_options") or {})
        method = d.get("method", "bp")
        for f, (_, key, _) in legacy_fields().items():  # 0.2's flat option fields → the method's own options
            if f in d and key not in opts and _legacy_owner(method, f):
                opts[key] = d[f]
        d["method_options"] = opts
        return cls(**{**LEGACY, **{k: v for k, v in d.items() if k in names}})

    @property
    def epochs_run(self) -> int:
        """Epochs actually trained: ``stop_after`` when set, else the whole budget."""
        return self.epochs if self.stop_after is None else self.stop_after

    def same_as(self, stored: dict) -> bool:
        """Whether a config stored by any version (missing fields = what it ran with) equals this one.

        Where the data was read from (``data_dir``, ``download``) does not count: the same data moved or
        given by a relative path is the same run; stores that reuse runs check the data's hash instead.
        """
        try:
            other = TrainConfig.from_dict(stored)
        except (TypeError, UsageError):
            return False
        return replace(other, data_dir=self.data_dir, download=self.download) == self

    def trainable(self) -> tuple[int, ...]:
        """1-based indices of the blocks that train (see :func:`trainable_blocks`)."""
        return trainable_blocks(self.train_blocks, self.num_blocks)


def _legacy_owner(method: str, flat: str) -> bool:
    """Whether ``method`` declares an option stored as the 0.2 flat field ``flat``."""
    from .methods import METHODS
    from .methods.options import declared

    return method in METHODS and any(o.legacy == flat for o in declared(METHODS.get(method)).values())


# what a stored config that lacks a field ran with (fields added after 0.1.0)
LEGACY: dict[str, Any] = {"variant": "v0.1", "augment": "none", "stop_after": None, "penalty_form": "rel"}
# fields stored under an earlier name (0.2's probes were renamed so none collides with the protocol's methods)
RENAMED: dict[str, str] = {"bridge_alpha": "credit_mix", "init_checkpoint": "warm_start"}


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
