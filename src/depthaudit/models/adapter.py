"""Audit a user's own residual network: name its embedding, blocks and readout; the adapter does the rest.

    from depthaudit.models import ResidualAdapter
    model = ResidualAdapter(net, embed="stem", blocks="layers", readout=["norm", "head"],
                            block_includes_residual=True)

``blocks`` names an iterable of modules (an ``nn.ModuleList``/``nn.Sequential``). If each block already
computes ``h + f(h)`` (``block_includes_residual=True``) the adapter audits ``f(h) = block(h) − h``.
BP, DFA and every method that only reads stream states work on any adapted model; FA-style methods need
the blocks to provide ``feedback_weights``/``forward_cached``/``fa_vjp`` (see ``models/base.py``).
"""

from collections.abc import Sequence

import torch
from torch import nn

from .base import ResidualModel


class _Delta(nn.Module):
    """``f(h) = block(h) − h`` for a block that adds its own skip connection."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.block = block

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """The block's residual update."""
        return self.block(h) - h


class ResidualAdapter(ResidualModel):
    """A :class:`ResidualModel` view of a user's module; parameters are shared, not copied."""

    def __init__(self, net: nn.Module, embed: str, blocks: str, readout: str | Sequence[str],
                 block_includes_residual: bool = False):
        super().__init__()
        get = net.get_submodule
        self.embed = get(embed)
        blk = list(get(blocks))
        self.blocks = nn.ModuleList(_Delta(b) if block_includes_residual else b for b in blk)
        names = [readout] if isinstance(readout, str) else list(readout)
        self.readout = get(names[0]) if len(names) == 1 else nn.Sequential(*(get(n) for n in names))
