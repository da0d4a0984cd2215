"""Gradient-matched insertion (SPEC §4): a zero-init block whose output projection is fitted to −α·g.

At a candidate position of a trained model, with the model in eval mode and cached analysis batches:
``g`` is the per-example gradient ``∂ℓ_b/∂h_b`` at that position (the mean-loss gradient times B), ``Ψ`` the
new block's features at its fixed seeded init. The output projection alone is fitted by least squares
(float64, bias column included) so the block outputs ``≈ −α·g``; nothing else changes and nothing is
trained further. Reported: the training loss on the analysis batches before and after, per candidate.
To first order the change is ``−α·⟨g, P_Ψ g⟩/B ≤ 0``; it shrinks as the network saturates.
"""

import torch
import torch.nn.functional as F

from ..models.resnet import ResNetCIFAR
from .insert import block_features, insert_zero_block


def _loss(model, batches, loss_fn) -> float:
    with torch.no_grad():
        return sum(loss_fn(model(x), y).item() for x, y in batches) / len(batches)


def _lstsq(psi: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Least-squares ``W`` (m × d) with ``psi @ W ≈ target`` in float64 (minimum-norm for rank deficiency)."""
    return torch.linalg.lstsq(psi.double(), target.double(), driver="gelsd").solution


def gradient_matched(model, batches, position: int, alpha: float = 1e-3, seed: int = 0, loss_fn=None) -> dict:
    """Insert at ``position``, fit the output projection to ``−α·g``; loss before/after (no training)."""
    loss_fn = loss_fn or F.cross_entropy
    model.eval()
    before = _loss(model, batches, loss_fn)
    hs, gs = [], []
    for x, y in batches:
        logits, states = model(x, return_states=True)
        (g,) = torch.autograd.grad(loss_fn(logits, y), states[position])
        hs.append(states[position].detach())
        gs.append(g * x.shape[0])  # per-example gradient ∂ℓ_b/∂h_b
    if isinstance(model, ResNetCIFAR):
        grown = model.insert_zero_block(position, seed).eval()
        blk = grown.blocks[position]
        with torch.no_grad():
            cols, targ = [], []
            for h, g in zip(hs, gs, strict=True):
                c = F.unfold(blk.features(h), 3, padding=1).transpose(1, 2).reshape(-1, blk.conv2.in_channels * 9)
                cols.append(torch.cat([c, torch.ones(c.shape[0], 1, device=c.device)], 1))
                targ.append((-alpha * g * (h > 0)).permute(0, 2, 3, 1).reshape(-1, g.shape[1]))
            w = _lstsq(torch.cat(cols), torch.cat(targ))  # (C·9 + 1, C)
            blk.conv2.weight.copy_(w[:-1].T.reshape(blk.conv2.weight.shape).to(blk.conv2.weight.dtype))
            bn = blk.bn2  # eval-mode BN as the identity plus the fitted bias
            bn.weight.copy_(torch.sqrt(bn.running_var + bn.eps))
            bn.bias.copy_(bn.running_mean + w[-1].to(bn.bias.dtype))
    else:
        grown = insert_zero_block(model, position, seed).eval()
        blk = grown.blocks[position]
        with torch.no_grad():
            psi = torch.cat([block_features(blk, h) for h in hs])  # the zero block's tangent features (n, m)
            targ = torch.cat([(-alpha * g).reshape(-1, g.shape[-1]) for g in gs])
            w = _lstsq(psi, targ)  # (m, d): the output projections over those features
            if hasattr(blk, "set_tangent"):
                blk.set_tangent(w)
            else:
                blk.fc2.weight.copy_(w[:-1].T.to(blk.fc2.weight.dtype))
                blk.fc2.bias.copy_(w[-1].to(blk.fc2.bias.dtype))
    after = _loss(grown, batches, loss_fn)
    return {"position": position, "alpha": alpha, "loss_before": before, "loss_after": after,
            "delta": after - before}
