"""Function-preserving insertion: a new block whose output projection is exactly zero.

**The insertion's tangent space** (SPEC §4: V, growth and gradient-matched insertion use one
parametrisation). For the constant-width families (ResMLP, ViT, GPT decoder) the inserted block is
:func:`zero_block`: a same-family block re-initialised from a seed with its output projections
(``block.output_layers()``, e.g. ``fc2``) at weight 0 and bias 0. At that origin every other parameter's
gradient is exactly 0 (each reaches the output only through the zero projection), so the first-order
directions are the output projection's weight and bias: features ``[ψ(h), 1]`` with
``ψ(h) = GELU(fc1(LN(h)))`` (:func:`block_features`). ``grow``, ``V`` and the gradient-matched insertion all
use this block, drawn from the same seed at the same position. For a transformer/GPT block both sub-layers'
output projections (``o``, ``fc2``) are zeroed and the tangent features are ``[c, ψ, 1]``, ``c`` the attention
context (``ViTBlock.tangent_features``).
"""

import copy

import torch
import torch.nn.functional as F

from ..models.base import ResidualModel


@torch.no_grad()
def zero_block(model: ResidualModel, seed: int = 0) -> torch.nn.Module:
    """A fresh block of ``model``'s family (a copy of block 1 re-initialised from ``seed``), output zeroed.

    Every Linear weight U(±1/√fan_in) with bias 0, every LayerNorm γ = 1, β = 0, then the output projections
    (``block.output_layers()``; default: the last Linear) weight and bias 0, so ``f(h) = 0`` exactly.
    """
    blk = copy.deepcopy(model.blocks[0])
    gen = torch.Generator().manual_seed(seed)
    linears = [m for m in blk.modules() if isinstance(m, torch.nn.Linear)]
    for lin in linears:
        bound = lin.in_features ** -0.5
        w = torch.empty(lin.weight.shape).uniform_(-bound, bound, generator=gen)
        lin.weight.copy_(w.to(lin.weight.dtype))
        if lin.bias is not None:
            lin.bias.zero_()
    for ln in (m for m in blk.modules() if isinstance(m, torch.nn.LayerNorm)):  # a fresh LN: γ = 1, β = 0
        ln.reset_parameters()
    for out in output_layers(blk):
        out.weight.zero_()
        if out.bias is not None:
            out.bias.zero_()
    return blk


def output_layers(blk: torch.nn.Module) -> list[torch.nn.Linear]:
    """The Linear layers whose zeroing silences the block (``blk.output_layers()``, else its last Linear)."""
    if hasattr(blk, "output_layers"):
        return blk.output_layers()
    return [[m for m in blk.modules() if isinstance(m, torch.nn.Linear)][-1]]


def block_features(blk: torch.nn.Module, h: torch.Tensor) -> torch.Tensor:
    """The tangent features of a zero block at ``h`` (B, …, d): (positions, m), positions = every leading index.

    The block's own ``tangent_features`` when it declares them (ResMLP: ``[ψ, 1]``; transformer/GPT: ``[c, ψ, 1]``,
    both sub-layers); otherwise ``[ψ(h), 1]`` with ``ψ(h) = GELU(fc1(LN(h)))`` from its ``ln``/``fc1``.
    """
    if hasattr(blk, "tangent_features"):
        return blk.tangent_features(h)
    ln = getattr(blk, "ln", None)
    u = F.layer_norm(h, h.shape[-1:], ln.weight if ln is not None else None, ln.bias if ln is not None else None,
                     eps=ln.eps if ln is not None else 1e-5)
    psi = F.gelu(blk.fc1(u)).reshape(-1, blk.fc1.out_features)
    return torch.cat([psi, torch.ones(psi.shape[0], 1, dtype=psi.dtype, device=psi.device)], 1)


@torch.no_grad()
def insert_zero_block(model: ResidualModel, position: int, seed: int = 0, inplace: bool = False) -> ResidualModel:
    """``model`` (a copy unless ``inplace``) with :func:`zero_block` from ``seed`` after stream position ``position``.

    ``position`` is 0..L; the new block becomes block ``position + 1`` (1-based) and ``h + f(h) == h`` bit for bit.
    """
    if not 0 <= position <= model.num_blocks:
        raise ValueError(f"position {position} is not in 0..{model.num_blocks}")
    blk = zero_block(model, seed)
    blk.to(next(model.blocks[0].parameters()).device)
    new = model if inplace else copy.deepcopy(model)
    new.blocks.insert(position, blk)
    return new
