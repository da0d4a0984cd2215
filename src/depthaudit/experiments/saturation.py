"""``depthaudit saturation``: train ResNet-8 + N for each N, then measure AG, AGmax and V per candidate.

Each depth is one run of the shared sweep runner (resumable, one JSON file). Training is plain
backprop (AdamW, cosine, the recipe's defaults); measurement uses ``analysis_batches`` training batches
of the trained model in eval mode (mean loss). V uses the BasicBlock family's features at a fixed
seeded init, im2col'ed for its 3×3 output convolution (+ a bias column), against the activation
gradient masked by the ReLU that follows the insertion (``h_l > 0``), since that is what the new block's
output sees; AG is the plain activation-gradient norm, so V ≤ AG still holds.
"""

import time
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from ..config import derive_seed
from ..depth.growth import activation_gradients, mlp_features, resnet_features
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

    def to_dict(self) -> dict:
        """JSON-able."""
        return asdict(self)

    def describe(self) -> str:
        """One line for listings: the family and its depth."""
        if self.family == "gpt":
            return f"gpt d={self.d_hidden}, {self.base_blocks} + {self.extra} blocks"
        return f"resnet-8 + {self.extra} blocks on {self.dataset}"

    def same_as(self, stored: dict) -> bool:
        """Equality with a stored config."""
        return stored == self.to_dict()


def train_plain(model, data, epochs: int, batch: int, lr: float, wd: float, seed: int, device, log=None,
                loss_fn=F.cross_entropy):
    """Plain backprop (AdamW, the recipe's cosine schedule) through the one training loop; returns its history."""
    from ..train import evaluate, fit, plain_step

    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=wd)
    model.train()
    hist, _ = fit(data.x_train.shape[0], batch, epochs, lr, seed, device, plain_step(model, opt, data, loss_fn),
                  lambda: evaluate(model, data.x_test, data.y_test, 500, loss_fn), log=log or (lambda m: None))
    return hist


def run_depth(spec, data=None, log=None, argv=None) -> dict:
    """Sweep runner for one depth: train, measure, return the record."""
    from ..data import load_data

    cfg: SaturationRun = spec.cfg
    device = torch.device(cfg.device)
    t0 = time.perf_counter()
    loss_fn = F.cross_entropy
    if cfg.family == "gpt":
        from ..data.text import load_text
        from ..models.gpt import GPTDecoder, lm_loss

        data = load_text(cfg.text, cfg.context, device)
        model = GPTDecoder(data.vocab, cfg.context, cfg.d_hidden, cfg.base_blocks + cfg.extra, seed=cfg.seed)
        model, loss_fn = model.to(device), lm_loss
    else:
        if data is None:
            data = load_data(cfg.dataset, cfg.data_dir, False, device)
        model = ResNetCIFAR(data.num_classes, cfg.extra, cfg.seed, in_ch=data.input_shape[0]).to(device)
    hist = train_plain(model, data, cfg.epochs, cfg.batch_size, cfg.lr, cfg.weight_decay, cfg.seed, device, log,
                       loss_fn=loss_fn)
    gen = torch.Generator().manual_seed(derive_seed(cfg.seed, "analysis"))
    idx = torch.randperm(data.x_train.shape[0], generator=gen).to(device)
    bs = cfg.batch_size
    batches = [(data.x_train[idx[i * bs:(i + 1) * bs]], data.y_train[idx[i * bs:(i + 1) * bs]])
               for i in range(cfg.analysis_batches)]
    if cfg.family == "gpt":  # the decoder block family's MLP features at a fixed seeded init
        fresh = GPTDecoder(data.vocab, cfg.context, cfg.d_hidden, 1, seed=derive_seed(cfg.seed, "candidate") % 2**31)
        fc1 = fresh.blocks[0].fc1.to(device)
        feature_fn, tangent_fn = (lambda i, h: mlp_features(h, fc1)), None
    else:
        feature_fn, tangent_fn = resnet_features(model, cfg.seed)
    sig = activation_gradients(model, batches, feature_fn=feature_fn, tangent_fn=tangent_fn, loss_fn=loss_fn)
    sig["low_signal"] = sig["AGmax"] < cfg.low_signal
    from ..depth.matched import gradient_matched

    matched = [gradient_matched(model, batches, p, cfg.alpha, seed=derive_seed(cfg.seed, f"m{p}") % 2**31,
                                loss_fn=loss_fn) for p in range(len(model.blocks) + 1)]
    return {"schema": "depthaudit.saturation_run.v1", "status": "ok", "config": cfg.to_dict(), "tracking": None,
            "provenance": provenance(device, data.provenance(), cfg.seed, argv),
            "blocks": len(model.blocks), "params": sum(p.numel() for p in model.parameters()),
            "history": hist, "final": {"test_loss": hist[-1]["test_loss"] if hist else None,
                                       "test_acc": hist[-1]["test_acc"] if hist else None},
            "signal": sig, "matched": {"alpha": cfg.alpha, "delta": [m["delta"] for m in matched],
                                       "loss_before": matched[0]["loss_before"] if matched else None},
            "timing": {"seconds": round(time.perf_counter() - t0, 3)}}
