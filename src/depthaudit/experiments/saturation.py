"""``depthaudit saturation``: train base + N blocks for each N, then measure AG, AGmax and V per candidate.

Each depth is one run of the shared sweep runner (resumable, one JSON file), trained by the one loop
(:func:`depthaudit.loop.fit`). Families: ``resnet`` (ResNet-8 + N) and ``gpt`` (a decoder of base + N
blocks) train with plain backprop (AdamW, cosine, the recipe's defaults); ``resmlp`` (any registered
residual model, default the reference ResMLP, base + N blocks) trains **under a credit method** with the
audit's recipe (:func:`depthaudit.loop.train`), and AG/V are then measured twice: from the true gradient and
from the method's own credit (:func:`depthaudit.depth.growth.credit_signal`).

Measurement uses ``analysis_batches`` training batches of the trained model in eval mode (mean loss).
One tangent space: V is that of the very zero block the gradient-matched insertion (and ``grow``) puts at
each position, drawn from the same seed — ResNet: bn2's γ, β per channel (:func:`resnet_value`, the gradient
masked by the ReLU after the residual sum); ResMLP: ``[ψ, 1]``; GPT: ``[attention context, ψ, 1]``.
"""

import contextlib
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..config import DEFAULT_EPOCHS, TrainConfig, resolve_device
from ..data import DATASETS
from ..data.base import generated
from ..depth.growth import activation_gradients, credit_signal, separated_test
from ..depth.matched import gradient_matched
from ..fields import arg, check_choices, check_ranges, check_types, like, refuse
from ..methods import parse_method_spec
from ..provenance import provenance
from ..seeds import derive_seed
from ..stores import RunSpec
from .cell import Cell
from .families import FAMILIES, DepthFamily, _uses
from .pretrained import PretrainedRun, run_pretrained


def family_names(growable: bool = False):
    """``--family``'s choices: the registered families (``growable``: those ``grow`` can grow), read when asked."""
    return lambda: [n for n in FAMILIES.names() if not growable or FAMILIES.get(n).growable]


def family_help(growable: bool = False):
    """``--family``'s help: each family's name and its few words (plug-ins included), read when asked."""
    return lambda: " | ".join(f"{n} ({FAMILIES.get(n).help})" for n in family_names(growable)())


def family_widths(growable: bool = False):
    """``--d-hidden``'s default in the help: each family's own width (``gpt 64, resmlp 256``), read when asked."""
    return lambda: ", ".join(f"{n} {FAMILIES.get(n).default_d_hidden}" for n in family_names(growable)()
                             if FAMILIES.get(n).default_d_hidden is not None)


def family_batches(growable: bool = False):
    """``--batch-size``'s default in the help: the families' (``128; hf 8``), read when asked."""

    def text() -> str:
        base = DepthFamily.default_batch_size
        other = [f"{n} {FAMILIES.get(n).default_batch_size}" for n in family_names(growable)()
                 if FAMILIES.get(n).default_batch_size != base]
        return "; ".join([str(base), *other])

    return text


def resolve_budget(cfg) -> None:
    """A depth config's budget, as every command's ``epochs``, and its ``stop_after`` checked (cfg being built).

    ``epochs=None`` is the dataset's (CIFAR 100, others 20; a text family :data:`~depthaudit.config.DEFAULT_EPOCHS`);
    ``stop_after`` trains the first N epochs of it (1..epochs).
    """
    if cfg.epochs is None:
        text = FAMILIES.get(cfg.family).reads_text
        budget = DEFAULT_EPOCHS if text else DATASETS.meta(cfg.dataset).get("epochs", DEFAULT_EPOCHS)
        object.__setattr__(cfg, "epochs", budget)
    if cfg.stop_after is not None and not cfg.stop_after <= cfg.epochs:
        raise refuse(cfg, f"{{stop_after}} must be in 1..{{epochs}} ({cfg.epochs}), got {cfg.stop_after}")
    if cfg.stop_after == cfg.epochs:  # the whole budget: no stop (one run, one identity), as TrainConfig
        object.__setattr__(cfg, "stop_after", None)


MODEL, RECIPE, MEASURE, HF = "model", "data and recipe", "measurement", "pretrained models (--family hf)"


@dataclass(frozen=True, kw_only=True)
class SaturationConfig:
    """A depth sweep (``depthaudit saturation``): one run of base + N blocks per N in ``extra``, each measured.

    Every field is also the command's flag (its help, range, choices and help group declared here, once).
    ``family`` is a key of :data:`~depthaudit.experiments.families.FAMILIES` (``resnet``, ``gpt``, ``resmlp``,
    ``hf``, or one you register). ``None`` fields take the family's default: ``batch_size`` 128 (hf: 8 windows),
    ``d_hidden`` 64 (gpt) or 256 (resmlp), ``method`` ``bp`` (resmlp; the other families train with plain
    backprop); ``epochs`` ``None`` is the dataset's budget (text: ``DEFAULT_EPOCHS``). ``model`` …
    ``grow_train`` are the ``hf`` family's (pretrained models, one cell per model).
    """

    family: str = arg("resnet", help=family_help(), choices=family_names())
    extra: tuple[int, ...] = arg((0, 1, 2, 3, 6), help="extra blocks N over the base model",
                                 lo=0, metavar="N")
    # the model of each depth
    arch: str = like(TrainConfig, "arch", help="resmlp: the residual model", group=MODEL)
    method: str | None = arg(None, help="resmlp: credit method, any registered one with options, e.g. fa, dfa, "
                             "fa-stream:identity", metavar="SPEC", default_text="bp")
    d_hidden: int | None = arg(None, help="gpt, resmlp: width", lo=1, default_text=family_widths())
    base_blocks: int = arg(1, help="gpt, resmlp: blocks before the extras", lo=1)
    base_width: int = arg(16, help="resnet: widths W, 2W, 4W (ImageNet-100: 32)", lo=1,
                          metavar="W")
    context: int = arg(64, help="gpt, hf: context length", lo=1, metavar="T")
    # data and the recipe (TrainConfig's declarations: the same defaults and ranges)
    dataset: str = like(TrainConfig, "dataset", "cifar10", group=RECIPE)
    data_dir: str | None = like(TrainConfig, "data_dir")
    download: bool = like(TrainConfig, "download")
    text: str | None = arg(None, help="gpt, hf: UTF-8 text or .npy tokens", metavar="FILE",
                           default_text="embedded, no download")
    epochs: int | None = like(TrainConfig, "epochs", default_text="the dataset's; CIFAR 100, others and text 20")
    stop_after: int | None = like(TrainConfig, "stop_after")
    batch_size: int | None = like(TrainConfig, "batch_size", None, default_text=family_batches())
    optimizer: str = like(TrainConfig, "optimizer", help="resmlp: adamw | sgd (ours); others: adamw")
    lr: float | None = like(TrainConfig, "lr", help="learning rate", default_text="adamw 1e-3, sgd 3e-4")
    weight_decay: float | None = like(TrainConfig, "weight_decay", help="weight decay",
                                      default_text="adamw 0.01, sgd 5e-4")
    seed: int = like(TrainConfig, "seed")
    device: str = like(TrainConfig, "device")
    # what is measured at each depth
    analysis_batches: int = arg(4, help="analysis batches", lo=1, group=MEASURE, metavar="B")
    analysis_split: str = arg("test", help="where AG is measured: held-out or training batches",
                              choices=("test", "train"))
    low_signal: float = arg(5e-3, help="AGmax flag level", lo=0, lo_open=True)
    delta: float | None = arg(None, help="separated test: δ of H0 Γ ≤ δ", lo=0, advanced=True,
                              default_text="--low-signal")
    margin: float | None = arg(None, help="separated test: t, decided at AGmax > δ + t", lo=0, advanced=True,
                               metavar="T", default_text="2 standard errors, ours")
    alpha: float = arg(1e-3, help="gradient-matched insertion: fit the new block to -α·g", lo=0, lo_open=True)
    # the hf family's: pretrained models, one cell per model
    model: tuple[str, ...] = arg((), help="Hub names, folders or .gguf files of causal LMs (depthaudit[hf])",
                                 group=HF, metavar="NAME")
    revision: str | None = arg(None, help="model revision, e.g. step143000", advanced=True, metavar="REV")
    continue_steps: int = arg(0, help="continue pretraining N AdamW steps on --text first", lo=0)
    continue_lr: float = arg(1e-5, help="its lr", lo=0, lo_open=True, advanced=True)
    importance: tuple[int, ...] | None = arg(None, help="also Block Influence, angular distance l->l+N, measured "
                                             "removal losses", lo=1, optional_values=True,
                                             default_text=lambda: "off; given alone: " + " ".join(
                                                 map(str, FAMILIES.get("hf").default_importance)))
    bootstrap: int = arg(1000, help="--importance: bootstrap resamples for the rank correlations", lo=1,
                         advanced=True, metavar="R")
    grow_steps: int = arg(0, help="train the zero block inserted at the highest-V and the lowest-V boundary N steps",
                          lo=0, default_text="0, off")
    grow_lr: float = arg(1e-3, help="--grow-steps: the new block's lr (the model's: --continue-lr)", lo=0,
                         lo_open=True, advanced=True)
    grow_train: str = arg("all", help="--grow-steps: train the pretrained weights too, or only the new block",
                          choices=("all", "block"), advanced=True)

    def __post_init__(self):
        for name in ("extra", "model"):  # lists from a caller or the CLI: stored as tuples (hashable, frozen)
            v = getattr(self, name)  # (anything else, say extra=1, is refused by check_types in one line)
            v = tuple(v) if isinstance(v, list | tuple) else v
            with contextlib.suppress(TypeError):  # (an unhashable entry: check_types names it below)
                v = tuple(dict.fromkeys(v)) if isinstance(v, tuple) else v
            object.__setattr__(self, name, v)
            # (each once, in order, as the CLI's --extra 1 0 1 is: walk 34 case 136; unhashable: check_types says)
        if isinstance(self.importance, list):
            object.__setattr__(self, "importance", tuple(self.importance))
        check_types(self)  # d_hidden='8', 8.5 or True: refused here, not deep inside torch
        object.__setattr__(self, "device", resolve_device(self.device))
        check_ranges(self)  # every field's declared range (the CLI's parser applies the same ones)
        check_choices(self, only=("analysis_split", "grow_train"))  # (walk 22: analysis_split="val" ran)
        if self.family not in FAMILIES:  # a ConfigError like every other refused value (the CLI lists the choices)
            raise refuse(self, f"{{family={self.family!r}}}: unknown depth family; choose one of: "
                               f"{', '.join(FAMILIES.names())}")
        if not FAMILIES.get(self.family).uses_base_width:  # (a ResNet-only value: held at its default, so it names
            object.__setattr__(self, "base_width", 16)  # no other run of this family)
        fam = FAMILIES.get(self.family)
        idle = (["arch"] if not fam.uses_arch else []) + (["dataset", "data_dir", "download"] if fam.reads_text
                                                          else []) + \
            (["continue_lr", "grow_lr", "grow_train", "bootstrap"] if not fam.pretrained else [])
        for f in idle:  # what the family does not read, held at its default: no other run (walk 21 W6-W8; the CLI
            object.__setattr__(self, f, type(self).__dataclass_fields__[f].default)  # notes each one given)
        if not fam.pretrained:  # the pretrained models' fields, each named as given (walk 20 W1: the config was
            for f in ("model", "revision", "continue_steps", "importance", "grow_steps"):  # built, and the command
                v = getattr(self, f)  # refused continue_steps=3 naming 'model')
                if (v is not None) if f == "importance" else v:
                    raise refuse(self, f"{{{f}}} is for pretrained models; add {{family=hf}}")
        if self.text is not None and not fam.reads_text:  # (walk 15 cases 90, 93; walk 20 W1: here, not at run)
            raise refuse(self, f"{{text}} is for {{family}} gpt/hf; {{family}} {self.family} trains on {{dataset}}")
        if not (fam.reads_text or fam.pretrained):  # the same for a context length, read by gpt and hf only
            object.__setattr__(self, "context", 64)  # (a resmlp --context 32 "differed in context": retrained)
        resolve_optimizer(self, "saturation")
        FAMILIES.get(self.family).checked_method(self, "saturation")  # a misspelt or ungrowable method: refused here
        resolve_budget(self)
        if not FAMILIES.get(self.family).pretrained and not self.extra:
            raise refuse(self, "{extra}: give at least one number of extra blocks")

    def run(self, extra: int) -> "SaturationRun":
        """The run of depth base + ``extra`` (the one place a :class:`SaturationRun` is built from a sweep)."""
        return SaturationRun(config=self, extra=extra)

    def specs(self) -> list:
        """The sweep's cells: one per depth ``N{extra}``, or one per model for a family of pretrained models.

        A depth is run by :func:`run_depth` (which asks the family to build and train it), a pretrained model
        (the ``hf`` family) by :func:`depthaudit.experiments.pretrained.run_pretrained`.
        """
        if FAMILIES.get(self.family).pretrained:
            return [RunSpec(m, PretrainedRun.of(self, m), runner=run_pretrained) for m in self.model]
        return [RunSpec(f"N{n}", self.run(n), runner=run_depth) for n in dict.fromkeys(self.extra)]


@dataclass(frozen=True, kw_only=True)
class SaturationRun(Cell):
    """One depth of the sweep: its :class:`SaturationConfig` (every value but ``extra``) and ``extra``."""

    extra: int
    KEYS = ("dataset", "data_dir", "extra", "epochs", "batch_size", "lr", "weight_decay", "seed", "analysis_batches",
            "low_signal", "alpha", "device", "family", "text", "context", "d_hidden", "base_blocks", "method", "arch",
            "analysis_split", "delta", "margin", "base_width", "stop_after", "optimizer")

    def to_dict(self) -> dict:
        """JSON-able; ``optimizer`` only where it is not adamw (an adamw record is the one every version stored)."""
        return adamw_unsaid(super().to_dict())

    def describe(self) -> str:
        """One line for listings: the family and its depth."""
        return FAMILIES.get(self.family).describe(self)

    def same_as(self, stored: dict) -> bool:
        """Equality with a stored config (fields added later: what that version ran — plain BP, training batches)."""
        legacy = {"method": None, "arch": "resmlp", "analysis_split": "train", "delta": None, "margin": None,
                  "base_width": 16, "stop_after": None}
        return {**legacy, **stored} == self.to_dict()

    def recipe(self):
        """Resmlp family: the audit recipe's run config of this depth (method options from the spec)."""
        base = TrainConfig(dataset=self.dataset, data_dir=self.data_dir, arch=self.arch, d_hidden=self.d_hidden,
                           num_blocks=self.base_blocks + self.extra, epochs=self.epochs, stop_after=self.stop_after,
                           batch_size=self.batch_size, optimizer=self.optimizer,
                           lr=self.lr, weight_decay=self.weight_decay, seed=self.seed, device=self.device)
        return parse_method_spec(self.method or "bp", base)[1]


def adamw_unsaid(d: dict) -> dict:
    """A cell's record without ``optimizer`` when it is adamw (the records before the field: the same bytes)."""
    if d.get("optimizer") == "adamw":
        del d["optimizer"]
    return d


def resolve_optimizer(cfg, command: str) -> None:
    """``cfg``'s lr and weight decay: its optimizer's defaults where not given (adamw's: 1e-3, 0.01, as always).

    The optimizer is the recipe's choice (``--family resmlp``); the other families train with their own AdamW loop,
    so another optimizer is refused for them (walk 18 case 85: ``--optimizer`` was not a flag of the depth sweeps).
    """
    from ..optim import OPTIMIZERS

    if cfg.optimizer not in OPTIMIZERS:
        raise refuse(cfg, f"{{optimizer}} {cfg.optimizer!r} not known; use one of {', '.join(OPTIMIZERS.names())}")
    if cfg.optimizer != "adamw" and not FAMILIES.get(cfg.family).under_method:
        raise refuse(cfg, f"{{optimizer}} {cfg.optimizer}: the {cfg.family} family trains with AdamW (its own loop); "
                     "use {family=resmlp} for the recipe's optimizers")  # (walk 19 case 90: CLI words from Python)
    for k in ("lr", "weight_decay"):
        if getattr(cfg, k) is None:
            object.__setattr__(cfg, k, OPTIMIZERS.meta(cfg.optimizer)[k])
    if generated(cfg.dataset):  # no folder and no download: a run given either is the same run (walk 19 cases 172,
        object.__setattr__(cfg, "data_dir", None)  # 173: every stored depth "differed in data_dir" and trained again)
        object.__setattr__(cfg, "download", False)


def _analysis_batches(data, cfg: SaturationRun, device) -> list:
    """``analysis_batches`` batches of the analysis split (held out by default), drawn from the run's seed."""
    x, y = (data.x_test, data.y_test) if cfg.analysis_split == "test" else (data.x_train, data.y_train)
    gen = torch.Generator().manual_seed(derive_seed(cfg.seed, "analysis"))
    idx = torch.randperm(x.shape[0], generator=gen).to(device)
    bs = min(cfg.batch_size, x.shape[0])
    k = max(1, min(cfg.analysis_batches, x.shape[0] // bs))
    return [(x[idx[i * bs:(i + 1) * bs]], y[idx[i * bs:(i + 1) * bs]]) for i in range(k)]


def run_depth(spec, data=None, log=None, argv=None) -> dict:
    """Sweep runner for one depth: train, measure, return the record (a diverged run is recorded unmeasured)."""
    cfg: SaturationRun = spec.cfg
    family = FAMILIES.get(cfg.family)
    device = torch.device(cfg.device)
    t0 = time.perf_counter()
    matched_seed = lambda p: derive_seed(cfg.seed, f"m{p}") % 2**31  # noqa: E731  (V and matched insertion)
    trained = family.train_depth(cfg, data, device, log or (lambda m: None))
    model, data, hist, status = trained.model, trained.data, trained.history, trained.status
    loss_fn, method, recipe = trained.loss_fn or F.cross_entropy, trained.method, trained.recipe
    rec = {"schema": "depthaudit.saturation_run.v1", "status": status, "config": cfg.to_dict(), "tracking": None,
           "provenance": provenance(device, data.provenance(), cfg.seed, argv, uses=_uses(cfg)),  # (its plug-ins:
           # walk 38 W3, a plug-in method's saturation records named none)
           "blocks": len(model.blocks), "params": sum(p.numel() for p in model.parameters()),
           "history": hist, "final": {"test_loss": hist[-1]["test_loss"] if hist else None,
                                      "test_acc": hist[-1]["test_acc"] if hist else None}}
    if recipe is not None:
        rec["recipe"] = recipe.to_dict()
    if status == "diverged":  # nothing to measure on a non-finite network; the record says so
        rec.update(signal=None, matched=None, timing={"seconds": round(time.perf_counter() - t0, 3)})
        return rec
    batches = _analysis_batches(data, cfg, device)
    # one tangent space: V is measured for the very zero block the matched insertion puts at l (same seed)
    feature_fn, value_fn = family.tangent(model, matched_seed)
    sig = activation_gradients(model, batches, feature_fn=feature_fn, loss_fn=loss_fn, value_fn=value_fn)
    sig["low_signal"] = sig["AGmax"] < cfg.low_signal
    sig["split"] = cfg.analysis_split
    sig["test"] = separated_test(sig, cfg.low_signal if cfg.delta is None else cfg.delta, cfg.margin,
                                 sum(b[0].shape[0] for b in batches))
    if method is not None:  # "is this network deep enough under this method?": AG/V from its own credit
        sig["credit"] = credit_signal(method, model, batches, feature_fn)
        sig["credit"]["method"] = str(cfg.method)  # its spec as given, not the class's optional `name` (walk 36
        # W2: a plug-in class without one stored "" and the figure's label lookup was an internal error)
        sig["credit"]["low_signal"] = sig["credit"]["AGmax"] < cfg.low_signal
    matched = [gradient_matched(model, batches, p, cfg.alpha, seed=matched_seed(p), loss_fn=loss_fn)
               for p in range(len(model.blocks) + 1)]
    rec.update(signal=sig, matched={"alpha": cfg.alpha, "delta": [m["delta"] for m in matched],
                                    "loss_before": matched[0]["loss_before"] if matched else None},
               timing={"seconds": round(time.perf_counter() - t0, 3)})
    return rec
