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

import time
from dataclasses import asdict, dataclass, fields

import torch
import torch.nn.functional as F

from ..depth.growth import activation_gradients, credit_signal, separated_test
from ..provenance import provenance
from ..seeds import derive_seed
from .families import FAMILIES


@dataclass(frozen=True, kw_only=True)
class SaturationConfig:
    """A depth sweep (``depthaudit saturation``): one run of base + N blocks per N in ``extra``, each measured.

    ``family`` is a key of :data:`~depthaudit.experiments.families.FAMILIES` (``resnet``, ``gpt``, ``resmlp``,
    ``hf``, or one you register). ``None`` fields take the family's default: ``batch_size`` 128 (hf: 8 windows),
    ``d_hidden`` 64 (gpt) or 256 (resmlp), ``method`` ``bp`` (resmlp; the other families train with plain
    backprop). ``model`` … ``grow_train`` are the ``hf`` family's (pretrained models, one cell per model).
    """

    family: str = "resnet"
    dataset: str = "cifar10"
    data_dir: str | None = None
    download: bool = False
    extra: tuple[int, ...] = (0, 1, 2, 3, 6)
    epochs: int | None = None  # the budget the schedule spans; None = the dataset's (text: DEFAULT_EPOCHS)
    batch_size: int | None = None
    lr: float = 1e-3
    weight_decay: float = 0.01
    seed: int = 42
    analysis_batches: int = 4
    low_signal: float = 5e-3
    alpha: float = 1e-3  # gradient-matched insertion step
    device: str = "cpu"
    text: str | None = None  # gpt, hf: a UTF-8 text or .npy token file; None = the embedded default
    context: int = 64
    d_hidden: int | None = None
    base_blocks: int = 1
    method: str | None = None  # resmlp: the credit method spec (e.g. "fa", "fa-stream:identity")
    arch: str = "resmlp"  # resmlp: the registered residual model
    analysis_split: str = "test"  # where AG is measured: test = held out, never fitted on | train
    delta: float | None = None  # separated test's δ (None = low_signal)
    margin: float | None = None  # separated test's t (None = 2 standard errors over the analysis batches, ours)
    base_width: int = 16  # resnet: stage widths w, 2w, 4w
    model: tuple[str, ...] = ()  # hf: Hub names, local folders or .gguf files
    revision: str | None = None
    continue_steps: int = 0
    continue_lr: float = 1e-5
    importance: tuple[int, ...] | None = None  # hf: n of the importance measures; () = (1, 2, 4, 8)
    bootstrap: int = 1000
    grow_steps: int = 0
    grow_lr: float = 1e-3
    grow_train: str = "all"
    stop_after: int | None = None  # train only the first N epochs of the ``epochs`` budget's schedule

    def __post_init__(self):
        for name in ("extra", "model"):  # lists from a caller or the CLI: stored as tuples (hashable, frozen)
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if self.importance is not None:
            object.__setattr__(self, "importance", tuple(self.importance))

    def run(self, extra: int) -> "SaturationRun":
        """The run of depth base + ``extra`` (the one place a :class:`SaturationRun` is built from a sweep)."""
        return SaturationRun(**{f.name: getattr(self, f.name) for f in fields(SaturationRun) if f.name != "extra"},
                             extra=extra)

    def specs(self) -> list:
        """The sweep's cells: one per depth ``N{extra}``, or one per model for a family of pretrained models.

        A depth is run by :func:`run_depth` (which asks the family to build and train it), a pretrained model
        (the ``hf`` family) by :func:`depthaudit.experiments.pretrained.run_pretrained`.
        """
        from ..stores import RunSpec

        if FAMILIES.get(self.family).pretrained:
            from .pretrained import PretrainedRun, run_pretrained

            return [RunSpec(m, PretrainedRun(
                model=m, revision=self.revision, text=self.text, context=self.context,
                continue_steps=self.continue_steps, continue_lr=self.continue_lr, batch_size=self.batch_size,
                analysis_batches=self.analysis_batches, low_signal=self.low_signal, mlp_ratio=4, seed=self.seed,
                device=self.device, importance=self.importance, bootstrap=self.bootstrap, grow_steps=self.grow_steps,
                grow_lr=self.grow_lr, grow_train=self.grow_train), runner=run_pretrained) for m in self.model]
        return [RunSpec(f"N{n}", self.run(n), runner=run_depth) for n in dict.fromkeys(self.extra)]


@dataclass(frozen=True, kw_only=True)
class SaturationRun:
    """One depth of the sweep (keyword-only; built by :meth:`SaturationConfig.run`)."""

    dataset: str
    data_dir: str | None
    extra: int
    epochs: int
    batch_size: int = 128
    lr: float = 1e-3
    weight_decay: float = 0.01
    seed: int = 42
    analysis_batches: int = 4
    low_signal: float = 5e-3
    alpha: float = 1e-3  # gradient-matched insertion step
    device: str = "cpu"
    family: str = "resnet"  # a key of FAMILIES
    text: str | None = None  # gpt: a UTF-8 text or .npy token file; None = the embedded default
    context: int = 64
    d_hidden: int = 64
    base_blocks: int = 1
    method: str | None = None  # resmlp: the credit method spec (e.g. "fa", "fa-stream:identity"); None = plain BP
    arch: str = "resmlp"  # resmlp family: the registered residual model
    analysis_split: str = "test"  # where AG is measured: test = held out, never fitted on | train
    delta: float | None = None  # separated test's δ (None = low_signal)
    margin: float | None = None  # separated test's t (None = 2 standard errors over the analysis batches, ours)
    base_width: int = 16  # resnet: stage widths w, 2w, 4w (16 = ResNet-CIFAR's; the paper's ImageNet-100 uses 32)
    stop_after: int | None = None  # train only the first N epochs of the ``epochs`` budget's schedule

    def to_dict(self) -> dict:
        """JSON-able."""
        return asdict(self)

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
        from ..config import TrainConfig
        from ..methods import parse_method_spec

        base = TrainConfig(dataset=self.dataset, data_dir=self.data_dir, arch=self.arch, d_hidden=self.d_hidden,
                           num_blocks=self.base_blocks + self.extra, epochs=self.epochs, stop_after=self.stop_after,
                           batch_size=self.batch_size,
                           lr=self.lr, weight_decay=self.weight_decay, seed=self.seed, device=self.device)
        return parse_method_spec(self.method or "bp", base)[1]


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
    from ..depth.matched import gradient_matched

    cfg: SaturationRun = spec.cfg
    family = FAMILIES.get(cfg.family)
    device = torch.device(cfg.device)
    t0 = time.perf_counter()
    matched_seed = lambda p: derive_seed(cfg.seed, f"m{p}") % 2**31  # noqa: E731  (V and matched insertion)
    trained = family.train_depth(cfg, data, device, log or (lambda m: None))
    model, data, hist, status = trained.model, trained.data, trained.history, trained.status
    loss_fn, method, recipe = trained.loss_fn or F.cross_entropy, trained.method, trained.recipe
    rec = {"schema": "depthaudit.saturation_run.v1", "status": status, "config": cfg.to_dict(), "tracking": None,
           "provenance": provenance(device, data.provenance(), cfg.seed, argv),
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
        sig["credit"]["low_signal"] = sig["credit"]["AGmax"] < cfg.low_signal
    matched = [gradient_matched(model, batches, p, cfg.alpha, seed=matched_seed(p), loss_fn=loss_fn)
               for p in range(len(model.blocks) + 1)]
    rec.update(signal=sig, matched={"alpha": cfg.alpha, "delta": [m["delta"] for m in matched],
                                    "loss_before": matched[0]["loss_before"] if matched else None},
               timing={"seconds": round(time.perf_counter() - t0, 3)})
    return rec
