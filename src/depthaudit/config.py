"""The frozen run configuration: built once by the CLI, passed down, serialised into every result."""

# imports inside functions: data, models, optim, recipe, methods load torch; the CLI's parser reads this module
import contextlib
import contextvars
import os
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from .errors import ConfigError, UsageError
from .fields import arg, check_ranges, check_types, refuse
from .io import why_not_a_file

DEFAULT_EPOCHS = 20  # the budget of a dataset that registers none


def _datasets():
    from .data import DATASETS

    return DATASETS.names()


def _augments():
    from .data.augment import AUGMENTS

    return ("auto", *AUGMENTS)


def _models():
    from .models import MODELS

    return MODELS.names()


def _optimizers():
    from .optim import OPTIMIZERS

    return OPTIMIZERS.names()


def _variants():
    from .models.resmlp import VARIANTS

    return VARIANTS


@dataclass(frozen=True)
class TrainConfig:
    """Everything that determines one training run (defaults = SPEC §2 audit recipe)."""

    # data
    dataset: str = arg("mnist1d", help="dataset", group="data", choices=_datasets)
    data_dir: str | None = arg(None, help="folder or .zip holding the data (cifar*)", metavar="DIR")
    download: bool = arg(False, help="download a missing CIFAR archive (verified by md5)", advanced=True)
    augment: str = arg("auto", help="training augmentation; auto = the dataset's (CIFAR: crop+flip, pad 4)",
                       choices=_augments, advanced=True, training=True)
    # model
    arch: str = arg("resmlp", help="residual model", group="model", choices=_models)
    variant: str = arg("ref", help="ref = the published protocol's model; v0.1 = depthaudit 0.1's (ours)",
                       choices=_variants, advanced=True)
    d_hidden: int = arg(256, help="stream width d", lo=1)
    num_blocks: int = arg(4, help="residual blocks L", lo=0)
    mlp_ratio: int | None = arg(None, help="MLP expansion", lo=1, advanced=True,
                                default_text="the variant's; ResMLP ref 1, v0.1 4; ViT 4")
    # credit method and which blocks train
    method: str = arg("bp", help="credit method, from {NAMES}, with options as name:key=value",
                      group="credit and recipe", metavar="M", per_run=True)
    train_blocks: str = arg("all", help="all | none | last:k | first:k", per_run=True)
    credit_mix: float | None = arg(None, help="credit mix (ours): (1-α)·method + α·BP credit", lo=0, hi=1,
                                   advanced=True, per_run=True)
    warm_start: str | None = arg(None, help="BP warm start (ours): start from these weights", metavar="PT",
                                 advanced=True, per_run=True)
    warmup: str | None = arg(None, help="warm up under this method (e.g. dfa) for --warmup-fraction of the budget "
                             "(the reference's CIFAR bridge runs: dfa, 0.2)", metavar="M", advanced=True, training=True)
    warmup_fraction: float = arg(0.2, help="fraction of the budget's steps under --warmup", lo=0, hi=1, advanced=True,
                                 training=True)
    # the method's own options, every declared one resolved (its defaults filled in): see methods/options.py
    method_options: dict[str, Any] = field(default_factory=dict)
    # recipe
    epochs: int | None = arg(None, help="budget: the cosine schedule spans it", lo=0, training=True,
                             default_text="the dataset's; CIFAR 100, others 20")
    stop_after: int | None = arg(None, help="train only the first N epochs of that schedule", lo=1,
                                 advanced=True, training=True)
    batch_size: int = arg(128, help="batch size", lo=1, training=True)
    optimizer: str = arg("adamw", help="adamw (the protocol's) | sgd (momentum 0.9, ours)", choices=_optimizers,
                         training=True)
    lr: float | None = arg(None, help="learning rate (cosine to 0)", lo=0, lo_open=True, training=True,
                           default_text="adamw 1e-3, sgd 3e-4")
    weight_decay: float | None = arg(None, help="weight decay (adamw decoupled, sgd L2)", lo=0, training=True,
                                     default_text="adamw 0.01, sgd 5e-4")
    scale_penalty: float = arg(0.0, help="scale penalty λ", lo=0, training=True)
    penalty_form: str = arg("abs", help="abs = λ‖f‖² (reference) | rel = λ‖f‖²/‖h‖² (ours)", choices=("abs", "rel"),
                            advanced=True, training=True)
    penalty_reduction: str = arg("example", help="penalty reduction (SPEC leaves it open): example = mean over the "
                                 "batch of ‖f_b‖² | element = mean over every element (÷d) | …-vs-sum = beside the "
                                 "reference's batch-summed surrogate (÷B); docs/protocol.md",
                                 choices=("example", "element", "example-vs-sum", "element-vs-sum"),
                                 advanced=True, training=True)
    seed: int = arg(42, help="seed (init, feedback, shuffle)", lo=0, hi=2**63 - 1, per_run=True)
    device: str = arg("auto", help="cpu | cuda | cuda:N | auto = cuda if available", metavar="DEV")
    # the warm start's content (sha256), read when the config is built: a checkpoint replaced under the same path
    # names another run, never the stored one (no flag: it is the file's, not a choice)
    warm_start_sha256: str | None = None

    def __post_init__(self):
        from .data.augment import AUGMENTS
        from .models.resmlp import DEFAULT_RATIO, VARIANTS

        check_types(self)  # d_hidden='8', 8.5 or True: refused here, not deep inside torch
        from .models import MODELS

        # refused where built, not at da.train (a dataset name is not: with ``data=`` it only labels the user's data)
        if self.arch not in MODELS:
            raise refuse(self, f"{{arch}} {self.arch!r} not known; use one of {', '.join(MODELS.names())} "
                         "(or register your own first)")
        object.__setattr__(self, "device", resolve_device(self.device))
        if self.variant not in VARIANTS:
            raise refuse(self, f"{{variant}} {self.variant!r} not known; use one of {', '.join(VARIANTS)}")
        if self.mlp_ratio is None:  # resolved here so every stored config names the expansion it ran
            object.__setattr__(self, "mlp_ratio", 4 if self.arch == "vit" else DEFAULT_RATIO[self.variant])
        from .data import DATASETS
        from .data.base import generated

        if generated(self.dataset):  # generated here, not read: no
            object.__setattr__(self, "data_dir", None)  # folder and no download, so a run given either is the same
            object.__setattr__(self, "download", False)  # run (walk 18 cases 107, 137: "another configuration")
        if self.augment == "auto":

            object.__setattr__(self, "augment", DATASETS.meta(self.dataset).get("augment", "none"))
        if self.augment not in AUGMENTS:
            raise refuse(self, f"{{augment}} {self.augment!r} not known; use one of auto, {', '.join(AUGMENTS)}")
        if self.augment != "none" and DATASETS.meta(self.dataset).get("images") is False:  # known without its data:
            # refused with the config, before any folder is looked at (walk 25 W1: a folder conflict came first)
            raise refuse(self, f"{{augment}} {self.augment}: {self.dataset} is not an image dataset; use "
                         "{augment=none}")
        if self.epochs is None:  # the budget: the dataset's own (CIFAR: the protocol's 100), else 20
            from .data import DATASETS

            object.__setattr__(self, "epochs", DATASETS.meta(self.dataset).get("epochs", DEFAULT_EPOCHS))
        from .optim import OPTIMIZERS

        if self.optimizer not in OPTIMIZERS:  # (the API's path; walk 18 case 55: a plain UsageError without .field)
            raise refuse(self, f"{{optimizer}} {self.optimizer!r} not known; use one of "
                         f"{', '.join(OPTIMIZERS.names())}")
        for k in ("lr", "weight_decay"):  # the optimizer's own defaults, resolved so every stored config names them
            if getattr(self, k) is None:
                object.__setattr__(self, k, OPTIMIZERS.meta(self.optimizer)[k])
        check_ranges(self)  # every field's declared range (the CLI's parser applies the same ones)
        if self.stop_after is not None and not 1 <= self.stop_after <= self.epochs:
            raise refuse(self, f"{{stop_after}} must be in 1..{{epochs}} ({self.epochs}), got {self.stop_after}")
        if self.stop_after == self.epochs:  # the whole budget: the same run bit for bit, so no other configuration
            object.__setattr__(self, "stop_after", None)  # (tests/test_walk19_unclear.py)
        trainable_blocks(self.train_blocks, self.num_blocks)  # validates the spelling and k
        object.__setattr__(self, "train_blocks", canonical_blocks(self.train_blocks))  # `ALL`, `last:02`: stored as
        # `all`, `last:2` (one run, one name and hash)
        if self.warm_start and not os.path.isfile(self.warm_start) and not _NOTHING_TRAINS.get():  # (not read then)
            inside = os.path.join(self.warm_start, "checkpoint.pt")
            if os.path.isdir(self.warm_start):
                raise refuse(self, f"{{warm_start}} {self.warm_start}: is a folder; give the checkpoint file in it"
                             + (f" ({inside})" if os.path.isfile(inside) else ""))
            raise refuse(self, f"{{warm_start}} {self.warm_start}: {why_not_a_file(self.warm_start)}; give a "
                         "checkpoint.pt path")
        if self.warm_start and self.warm_start_sha256 is None and not _NOTHING_TRAINS.get():
            from .data.base import sha256_file

            try:
                object.__setattr__(self, "warm_start_sha256", sha256_file(Path(self.warm_start)))
            except OSError as exc:
                raise refuse(self, f"{{warm_start}} {self.warm_start}: cannot be read "
                             f"({exc.strerror or exc})") from None
        elif not self.warm_start and self.warm_start_sha256 is not None:
            object.__setattr__(self, "warm_start_sha256", None)  # (no warm start: nothing to name)
        if self.penalty_form not in ("abs", "rel"):  # (the API's path; the CLI's parser refuses it first)
            raise refuse(self, f"{{penalty_form}} {self.penalty_form!r} not known; use abs or rel")
        from .recipe import PENALTY_REDUCTIONS

        if self.penalty_reduction not in PENALTY_REDUCTIONS:  # (the API's path; the parser refuses it first)
            raise refuse(self, f"{{penalty_reduction}} {self.penalty_reduction!r} not known; use one of "
                         f"{', '.join(PENALTY_REDUCTIONS)}")
        if self.scale_penalty == 0:  # the form of a zero penalty is meaningless: one canonical value
            given = [f"{f}={getattr(self, f)!r}" for f, d in (("penalty_form", "abs"), ("penalty_reduction", "example"))
                     if getattr(self, f) != d]
            if given:  # said, not dropped without a word (walk 17 case 3: a base's rel form lost under intervene)
                import warnings

                warnings.warn(f"TrainConfig: {' and '.join(given)} has no effect without scale_penalty > 0 and is "
                              "stored as abs/example; give scale_penalty, or for a λ grid give it to "
                              "InterveneConfig(penalty_form=…, penalty_reduction=…)", UserWarning, stacklevel=3)
            object.__setattr__(self, "penalty_form", "abs")
            object.__setattr__(self, "penalty_reduction", "example")
        from .methods import METHODS
        from .methods.options import resolve

        if self.warmup is not None:  # a method spec (``dfa``, ``fa:head=exact``), checked like --method's
            from .methods import parse_method_spec

            try:
                parse_method_spec(self.warmup, replace(self, method="bp", method_options={}, warmup=None))
            except ConfigError as exc:  # its options named as the caller gave them: warmup (--warmup)
                raise exc.renamed("method_options", f"{{warmup}} {self.warmup!r}") from None
            except UsageError as exc:  # (parse_spec's: an unknown method or option) named by its own field
                raise refuse(self, f"{{warmup}} {self.warmup!r}: {exc}") from None
        else:  # no warm-up: its fraction is meaningless, one canonical value
            object.__setattr__(self, "warmup_fraction", 0.2)

        if isinstance(self.method, str) and ":" in self.method \
                and self.method.partition(":")[0] in METHODS:  # the CLI's spec syntax, given to the field (an
            # unknown name is refused as one below: walk 27 case 35 advised method='o26', itself unknown)
            name, _, opts = self.method.partition(":")
            given = dict(kv.partition("=")[::2] for kv in opts.split(",") if kv)
            try:  # each value in its option's type, so the advice works as written (walk 26 case 17: "0.1")
                from .methods import parse_spec

                given = dict(parse_spec(self.method).given)
            except Exception:  # noqa: BLE001 (a bad spec: the strings as given; using them names the fault)
                pass
            raise refuse(self, f"{{method}} {self.method!r} is a method spec (name:options); give method={name!r}, "
                         f"method_options={given!r}, or cfg.with_method({self.method!r})")
        if self.method not in METHODS:  # (walk 16 case 83: a plain UsageError, no .field, unlike an unknown arch)
            unknown = self.method.partition(":")[0] if isinstance(self.method, str) else self.method
            raise refuse(self, f"{{method}} {unknown!r} not known; use one of {', '.join(METHODS.names())} "
                         "(or register your own first)")
        if self.credit_mix is not None and METHODS.get(self.method).exact_credits:  # BP's credit mixed toward BP is
            object.__setattr__(self, "credit_mix", None)  # BP's: no other run (walk 19 cases 126, 127)
        if self.credit_mix == 0:  # (1 - 0)·method + 0·BP is the method's own credit: no other run (walk 20 W9; the
            object.__setattr__(self, "credit_mix", None)  # same weights, test numbers equal to the bit)
        # the one check of a method's options: the method's own declarations (types, ranges, choices)
        object.__setattr__(self, "method_options", resolve(
            self.method, METHODS.get(self.method), dict(self.method_options or {}),
            hint="; to switch methods use cfg.with_method(spec), which takes that method's own options"))
        if self.warmup is not None:  # a warm-up that changes no step is none: one run, one identity (bit-identical
            self._idle_warmup()  # runs: tests/test_walk19_unclear.py), said from Python as the CLI notes it

    def _idle_warmup(self) -> None:
        """``warmup`` → None where it trains no step differently: a fraction of 0, or the method itself.

        A fraction of 0 is said (a UserWarning; the CLI notes it and drops it first); the method itself is not:
        an audit's row of its own warm-up method (``--warmup dfa``, row ``dfa``) is that method's plain run.
        """
        from .methods import parse_spec

        if self.warmup_fraction == 0:
            import warnings

            warnings.warn(f"TrainConfig: warmup={self.warmup!r} has no effect with warmup_fraction=0 (no step is "
                          "under it) and is stored as no warm-up", UserWarning, stacklevel=4)
        if self.warmup_fraction == 0 or str(parse_spec(self.warmup)) == str(self.method_spec):
            object.__setattr__(self, "warmup", None)
            object.__setattr__(self, "warmup_fraction", 0.2)

    @property
    def method_spec(self):
        """The resolved method spec: :class:`~depthaudit.methods.MethodSpec` of ``method`` and every option."""
        from .methods.specs import MethodSpec

        return MethodSpec(self.method, self.method_options.items())

    def with_method(self, spec: str) -> "TrainConfig":
        """This config running method ``spec`` (``"fa"``, ``"fa:head=exact"``) with that method's own options."""
        from .methods import parse_method_spec

        try:
            return parse_method_spec(spec, replace(self, method="bp", method_options={}))[1]
        except ConfigError:
            raise
        except UsageError as exc:  # an unknown method or option: named by its field, as TrainConfig(method=…)
            raise refuse(self, f"{{method}} {spec!r}: {exc}") from None  # names it (walk 37 W5)

    def __hash__(self) -> int:
        """Hashable like any frozen config (a set of configs, a dict key), though ``method_options`` is a dict."""
        return hash(tuple((k, tuple(sorted(v.items())) if isinstance(v, dict) else v) for k, v in vars(self).items()))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict of every field."""
        return asdict(self)

    def identity_dict(self) -> dict[str, Any]:
        """The dict that names this run in stores (folder hashes, file identities), stable across versions.

        Options the stores' records (``depthaudit.train.v1`` configs) hold as flat fields (``fa_head``,
        ``ep_beta``, …) are written back in that form, every one (at its default when this method does not read
        it), so stored runs keep their names; only options without such a field stay under ``method_options``.
        """
        from .methods.specs import legacy_fields

        d = self.to_dict()
        opts = dict(d.pop("method_options"))
        flat = {f: default for f, (_, _, default) in legacy_fields().items()}
        for f, (_, key, _) in legacy_fields().items():
            if key in opts and _legacy_owner(self.method, f):
                flat[f] = opts.pop(key)
        order = list(d)  # the stored records' field order: the flat options stand after warm_start
        at = order.index("warm_start") + 1
        out = {k: d[k] for k in order[:at]} | flat | {k: d[k] for k in order[at:]}
        from .methods import METHODS
        from .methods.options import declared

        # an option with no flat field names the run only when set away from its default (stored names stay)
        decl = declared(METHODS.get(self.method)) if self.method in METHODS else {}
        opts = {k: v for k, v in opts.items() if k not in decl or v != decl[k].default}
        if opts:
            out["method_options"] = opts
        for k, v in NAME_NEUTRAL.items():  # fields added later, at the value runs had before: stored names stay
            if k in out and out[k] == v:
                del out[k]
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
        for f, (_, key, _) in legacy_fields().items():  # the records' flat option fields → the method's own options
            if f in d and key not in opts and _legacy_owner(method, f):
                opts[key] = d[f]
        d["method_options"] = opts
        import warnings

        with nothing_trains(), warnings.catch_warnings():  # a run stored from a GPU reads back without one; an old
            warnings.simplefilter("ignore", UserWarning)  # record's legacy rel form at λ = 0 is stored abs, unsaid
            return cls(**{**LEGACY, **{k: v for k, v in d.items() if k in names}})

    @property
    def epochs_run(self) -> int:
        """Epochs actually trained: ``stop_after`` when set, else the whole budget."""
        return self.epochs if self.stop_after is None else self.stop_after

    def same_as(self, stored: dict) -> bool:
        """Whether a config stored by any version (missing fields = what it ran with) equals this one.

        Where the data was read from (``data_dir``, ``download``) does not count: the same data moved or
        given by a relative path is the same run; stores that reuse runs check the data's hash instead. Nor does
        where the warm start was read from, when both name the same checkpoint by its sha256.
        """
        with nothing_trains():  # a run stored from a GPU is compared, never run, here
            try:
                other = replace(TrainConfig.from_dict(stored), data_dir=self.data_dir, download=self.download)
                if other.warm_start_sha256 is not None and other.warm_start_sha256 == self.warm_start_sha256:
                    other = replace(other, warm_start=self.warm_start)  # the same weights read from another path
                elif self.warm_start_sha256 is None and other.warm_start == self.warm_start:  # built without
                    other = replace(other, warm_start_sha256=None)  # reading the file (a listing, a report): by path
            except (TypeError, UsageError):  # (a folder moved, an absolute path given for a relative one)
                return False
        return other == self

    def trainable(self) -> tuple[int, ...]:
        """1-based indices of the blocks that train (see :func:`trainable_blocks`)."""
        return trainable_blocks(self.train_blocks, self.num_blocks)


def _legacy_owner(method: str, flat: str) -> bool:
    """Whether ``method`` declares an option the stores' records hold as the flat field ``flat``."""
    from .methods import METHODS
    from .methods.options import declared

    return method in METHODS and any(o.legacy == flat for o in declared(METHODS.get(method)).values())


# what a stored config that lacks a field ran with (fields added after 0.1.0)
LEGACY: dict[str, Any] = {"variant": "v0.1", "augment": "none", "stop_after": None, "penalty_form": "rel",
                          "optimizer": "adamw"}
# fields added after runs were stored, at the value every earlier run had: left out of a run's name (its folder hash)
# so those runs are found again (``identity_dict``)
NAME_NEUTRAL: dict[str, Any] = {"optimizer": "adamw", "penalty_reduction": "example", "warmup": None,
                                "warmup_fraction": 0.2, "warm_start_sha256": None}
# fields some stored records hold under an earlier name (the toward-BP experiment fields were renamed so none
# collides with the protocol's methods)
RENAMED: dict[str, str] = {"bridge_alpha": "credit_mix", "init_checkpoint": "warm_start"}


_NOTHING_TRAINS = contextvars.ContextVar("depthaudit_nothing_trains", default=False)


@contextlib.contextmanager
def nothing_trains():
    """Configs built inside name devices without being run on them: ``cuda`` is accepted on a machine without it.

    For reading stored runs and for sweeps that train nothing (``list_cells``, ``stored_only``), so the cells and
    reports of runs trained on a GPU can be listed and rebuilt anywhere.
    """
    token = _NOTHING_TRAINS.set(True)
    try:
        yield
    finally:
        _NOTHING_TRAINS.reset(token)


def resolve_device(spec: str | None) -> str:
    """``auto`` (or None) → ``cuda:0`` when available else ``cpu``; ``cuda`` → ``cuda:0``.

    An unavailable or unknown device is refused in one line naming ``device`` (before any data loads or file is
    written).

    Inside :func:`nothing_trains` a ``cuda[:N]`` the machine lacks is accepted (nothing will run on it).
    """
    import torch

    if isinstance(spec, str) and not spec.strip():  # --device '': not a device (None is the default: auto)
        raise ConfigError("{device} '' is empty; give cpu, cuda, cuda:N or auto")
    spec = spec or "auto"
    if spec == "auto":
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(spec)
    except (RuntimeError, TypeError):
        raise ConfigError(f"{{device}} {spec!r} not understood; use cpu, cuda, cuda:N or auto") from None
    if dev.type == "cuda":
        idx = dev.index or 0
        if _NOTHING_TRAINS.get():
            return f"cuda:{idx}"
        if not torch.cuda.is_available():
            raise ConfigError(f"{{device}} {spec}: CUDA is not available here; use {{device=cpu}} (or auto)")
        if idx >= torch.cuda.device_count():
            raise ConfigError(f"{{device}} {spec}: only {torch.cuda.device_count()} CUDA device(s) here")
        return f"cuda:{idx}"
    if dev.type != "cpu":
        raise ConfigError(f"{{device}} {spec}: unsupported device type; use cpu, cuda[:N] or auto")
    return "cpu"


def usable_device(device: str) -> None:
    """Refuse, before anything runs, a device this machine lacks (a ``ConfigError`` naming ``device``).

    A config built inside :func:`nothing_trains` accepts one; a command that trains or measures must not reach
    torch with it (walk 20 W5: an AssertionError from torch).
    """
    token = _NOTHING_TRAINS.set(False)
    try:
        resolve_device(device)
    finally:
        _NOTHING_TRAINS.reset(token)


def canonical_blocks(spec: str) -> str:
    """A valid ``train_blocks`` spelling in its one stored form: lower case, no blanks, ``k`` without leading zeros."""
    spec = spec.strip().lower()
    kind, sep, k = spec.partition(":")
    return f"{kind.strip()}:{int(k)}" if sep else spec


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
            raise ConfigError(f"{{train_blocks}} {spec}: k={k} exceeds {{num_blocks}} {num_blocks}; "
                              f"use k <= {num_blocks}")
        if kind == "last":
            return tuple(range(num_blocks - k + 1, num_blocks + 1))
        return tuple(range(1, k + 1))
    raise ConfigError(f"{{train_blocks}} {spec!r} not understood; use all, none, last:k or first:k")
