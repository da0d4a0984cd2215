"""Function-preserving insertion: a new block whose output projection is exactly zero."""

import copy

import torch

from ..models.base import ResidualModel


@torch.no_grad()
def insert_zero_block(model: ResidualModel, position: int, seed: int = 0) -> ResidualModel:
    """A copy of ``model`` with a fresh block after stream position ``position`` (0..L), output zeroed.

    The new block is a same-family block (a deep copy of block 1 re-initialised from ``seed``) whose
    output projections (``block.output_layers()``; e.g. ``fc2``, or attention ``o`` and ``fc2``) have zero
    weight and bias, so ``f(h) = 0`` exactly and ``h + f(h) == h`` bit for bit.
    """
    if not 0 <= position <= model.num_blocks:
        raise ValueError(f"position {position} is not in 0..{model.num_blocks}")
    new = copy.deepcopy(model)
    blk = copy.deepcopy(model.blocks[0])
    gen = torch.Generator().manual_seed(seed)
    linears = [m for m in blk.modules() if isinstance(m, torch.nn.Linear)]
    for lin in linears:
        bound = lin.in_features ** -0.5
        lin.weight.copy_(torch.empty(lin.weight.shape).uniform_(-bound, bound, generator=gen))
        if lin.bias is not None:
            lin.bias.zero_()
    for ln in (m for m in blk.modules() if isinstance(m, torch.nn.LayerNorm)):  # a fresh LN: γ = 1, β = 0
        ln.reset_parameters()
    outs = blk.output_layers() if hasattr(blk, "output_layers") else [linears[-1]]
    for out in outs:
        out.weight.zero_()
        if out.bias is not None:
            out.bias.zero_()
    blocks = list(new.blocks)
    blocks.insert(position, blk)
    new.blocks = torch.nn.ModuleList(blocks)
    return new
