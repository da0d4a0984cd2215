"""GPT-style decoder for depth-sufficiency sweeps on text (SPEC §1, §4).

Token + learned position embedding → pre-LN causal transformer blocks (the ViT-Mini block with a
causal mask: one block = attention + MLP sub-layers) → terminal LayerNorm → LM head at every position.
Logits are (B, T, V); the loss is the mean next-token cross-entropy over all positions.
"""

import torch
import torch.nn.functional as F
from torch import nn

from .base import ResidualModel
from .resmlp import LNReadout
from .vit import ViTBlock


class TokenEmbed(nn.Module):
    """(B, T) token ids → (B, T, d)."""

    def __init__(self, vocab: int, context: int, d: int, gen: torch.Generator):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        with torch.no_grad():
            self.tok.weight.normal_(0, 0.02, generator=gen)
        self.pos = nn.Parameter(torch.randn(context, d, generator=gen) * 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``h_0``."""
        return self.tok(x) + self.pos[: x.shape[1]]


class GPTDecoder(ResidualModel):
    """``num_blocks`` causal pre-LN blocks of width ``d`` with ``heads`` heads."""

    def __init__(self, vocab: int, context: int, d: int = 64, num_blocks: int = 2, heads: int = 4,
                 mlp_ratio: int = 4, seed: int = 0):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.embed = TokenEmbed(vocab, context, d, gen)
        self.blocks = nn.ModuleList(ViTBlock(d, heads, mlp_ratio, gen, causal=True) for _ in range(num_blocks))
        self.readout = LNReadout(d, vocab, gen)  # terminal LN → LM head at every position


def lm_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over every position, logits (B, T, V), targets (B, T)."""
    return F.cross_entropy(logits.flatten(0, -2), y.flatten())
