"""The residual-model contract every model, method and diagnostic relies on.

``h_0 = embed(x)``; ``h_l = h_{l-1} + f_l(h_{l-1})`` for ``l = 1..L``; ``logits = readout(h_L)``.

A block ``f_l`` is an ``nn.Module`` mapping a stream state to a same-shaped update. Feedback methods
(FA and relatives) additionally need, from each block and from the readout:

* ``feedback_weights() -> dict[str, Tensor]``: the weights whose transposes FA replaces;
* ``forward_cached(x) -> (f, cache)``: the forward, keeping what the VJP needs;
* ``fa_vjp(cache, g, fb) -> Tensor``: the VJP to the input with every ``Wᵀ`` replaced by ``fb[name]``
  and every other derivative exact. With ``fb = feedback_weights()`` it must equal autograd's VJP
  (the law the tests check). The readout's ``cache`` is simply its input ``h_L``.
"""

import torch
from torch import nn


class ResidualModel(nn.Module):
    """``embed → blocks → readout`` with access to every stream state."""

    embed: nn.Module
    blocks: nn.ModuleList
    readout: nn.Module

    @property
    def num_blocks(self) -> int:
        """L, the number of residual blocks."""
        return len(self.blocks)

    def forward(self, x: torch.Tensor, return_states: bool = False):
        """Logits, or ``(logits, [h_0, …, h_L])`` when ``return_states``."""
        states = self.stream(self.embed(x))
        logits = self.readout(states[-1])
        return (logits, states) if return_states else logits

    def stream(self, h: torch.Tensor, start: int = 0) -> list[torch.Tensor]:
        """``[h_start, …, h_L]`` from ``h`` at position ``start``: ``h_l = h_{l-1} + f_l(h_{l-1})``.

        The one walk of the residual stream (the forward, the evaluator, the functional diagnostics); the
        training recipe's trace cuts the stream before every block instead (``recipe.trace_forward``).
        """
        states = [h]
        for blk in self.blocks[start:]:
            h = h + blk(h)
            states.append(h)
        return states

    def groups(self) -> dict[str, list[nn.Parameter]]:
        """Parameter groups that get one independent optimizer each: embed, block1..L, readout."""
        g = {"embed": list(self.embed.parameters())}
        for i, blk in enumerate(self.blocks, start=1):
            g[f"block{i}"] = list(blk.parameters())
        g["readout"] = list(self.readout.parameters())
        return g
