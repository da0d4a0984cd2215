"""Gradient-matched insertion (SPEC §4): a zero-init block whose output projection is fitted to −α·g.

The fitted parameters are the zero block's tangent space (one parametrisation with V and ``grow``): ``fc2``
(ResMLP), ``o`` and ``fc2`` (GPT/ViT), bn2's γ and β per channel (ResNet-CIFAR). A model whose zero block is not
the generic one (:func:`depthaudit.depth.insert.zero_block`) fits its own: ``model.fit_matched_block(position, seed,
states, grads, alpha)`` returns the grown model (ResNet-CIFAR's).

At a candidate position of a trained model, with the model in eval mode and cached analysis batches:
``g`` is the per-example gradient ``∂ℓ_b/∂h_b`` at that position (the mean-loss gradient times B), ``Ψ`` the
new block's features at its fixed seeded init. The output projection alone is fitted by least squares
(float64, bias column included) so the block outputs ``≈ −α·g``; nothing else changes and nothing is
trained further. Reported: the training loss on the analysis batches before and after, per candidate.
To first order the change is ``−α·⟨g, P_Ψ g⟩/B ≤ 0``; it shrinks as the network saturates.
"""

import copy

import torch
import torch.nn.functional as F

from .insert import block_features, insert_zero_block


def _loss(model, batches, loss_fn) -> float:
    """Mean loss over the batches, evaluated on a float64 copy of the model.

    The insertion's change (~α·B·V², often 1e-8) is below float32's resolution of a loss near 1 (ulp 1.2e-7).
    """
    m = copy.deepcopy(model).double().eval()
    with torch.no_grad():
        return sum(loss_fn(m(x.double() if x.is_floating_point() else x), y).item() for x, y in batches) / len(batches)


def _lstsq(psi: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Least-squares ``W`` (m × d) with ``psi @ W ≈ target`` in float64 (minimum-norm for rank deficiency)."""
    return torch.linalg.lstsq(psi.double(), target.double(), driver="gelsd").solution


def gradient_matched(model, batches, position: int, alpha: float = 1e-3, seed: int = 0, loss_fn=None,
                     keep: bool = False) -> dict:
    """Insert at ``position``, fit the output projection to ``−α·g``; loss before/after (no training).

    ``keep``: also return the fitted model under ``"grown"`` (tests read the fitted block's output).
    """
    loss_fn = loss_fn or F.cross_entropy
    model.eval()
    before = _loss(model, batches, loss_fn)
    hs, gs = [], []
    for x, y in batches:
        logits, states = model(x, return_states=True)
        (g,) = torch.autograd.grad(loss_fn(logits, y), states[position])
        hs.append(states[position].detach())
        gs.append(g * x.shape[0])  # per-example gradient ∂ℓ_b/∂h_b
    fit = getattr(model, "fit_matched_block", None)  # a model whose zero block is not the generic one fits its own
    if fit is not None:
        grown = fit(position, seed, hs, gs, alpha)
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
    out = {"position": position, "alpha": alpha, "loss_before": before, "loss_after": after, "delta": after - before}
    return out | ({"grown": grown} if keep else {})
