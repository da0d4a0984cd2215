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
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from ..config import derive_seed
from ..depth.growth import activation_gradients, credit_signal, resnet_value, separated_test, zero_block_features
from ..models.resnet import ResNetCIFAR
from ..provenance import provenance


@dataclass(frozen=True)
class SaturationRun:
    """One depth of the sweep."""

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
    family: str = "resnet"  # "resnet" (ResNet-8 + extra) or "gpt" (base_blocks + extra decoder blocks)
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
        if self.family == "gpt":
            return f"gpt d={self.d_hidden}, {self.base_blocks} + {self.extra} blocks"
        if self.family == "resmlp":
            return f"{self.arch} d={self.d_hidden}, {self.base_blocks} + {self.extra} blocks under {self.method}"
        return f"resnet-8 + {self.extra} blocks on {self.dataset}"

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


def train_plain(model, data, epochs: int, batch: int, lr: float, wd: float, seed: int, device, log=None,
                loss_fn=F.cross_entropy, stop_after: int | None = None):
    """Plain backprop (AdamW, the recipe's cosine schedule) through the one training loop: ``(history, status)``.

    The schedule spans the ``epochs`` budget; ``stop_after`` trains only its first N epochs.
    """
    from ..loop import evaluate, fit, plain_step

    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=wd)
    model.train()
    return fit(data.x_train.shape[0], batch, epochs, lr, seed, device, plain_step(model, opt, data, loss_fn),
               lambda: evaluate(model, data.x_test, data.y_test, 500, loss_fn), last_epoch=stop_after,
               log=log or (lambda m: None))


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
    from ..data import load_data
    from ..depth.matched import gradient_matched

    cfg: SaturationRun = spec.cfg
    device = torch.device(cfg.device)
    t0 = time.perf_counter()
    loss_fn, status, method, recipe = F.cross_entropy, "ok", None, None
    matched_seed = lambda p: derive_seed(cfg.seed, f"m{p}") % 2**31  # noqa: E731  (V and matched insertion)
    if cfg.family == "gpt":
        from ..data.text import load_text
        from ..models.gpt import GPTDecoder, lm_loss

        data = load_text(cfg.text, cfg.context, device)
        model = GPTDecoder(data.vocab, cfg.context, cfg.d_hidden, cfg.base_blocks + cfg.extra, seed=cfg.seed)
        model, loss_fn = model.to(device), lm_loss
    elif data is None:
        data = load_data(cfg.dataset, cfg.data_dir, False, device)
    if cfg.family == "resmlp":  # the audit's recipe under the credit method
        from ..loop import train

        recipe = cfg.recipe()
        run = train(recipe, data, log=log or (lambda m: None))
        model, method, hist, status = run.model, run.method, run.history, run.status
    else:
        if cfg.family == "resnet":
            model = ResNetCIFAR(data.num_classes, cfg.extra, cfg.seed, data.input_shape[0], cfg.base_width).to(device)
        hist, status = train_plain(model, data, cfg.epochs, cfg.batch_size, cfg.lr, cfg.weight_decay, cfg.seed,
                                   device, log, loss_fn=loss_fn, stop_after=cfg.stop_after)
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
    feature_fn = None if cfg.family == "resnet" else zero_block_features(model, matched_seed)
    value_fn = resnet_value(model, matched_seed) if cfg.family == "resnet" else None
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
