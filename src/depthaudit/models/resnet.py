"""ResNet-CIFAR for depth-sufficiency sweeps (SPEC §1, §4): BasicBlocks in 3 stages of widths 16/32/64.

ResNet-8 is one BasicBlock per stage; ``extra`` more blocks are added cyclically across the stages
(extra block i goes to stage i mod 3), giving 3 + extra blocks. The first block of stages 2 and 3
downsamples (stride 2, 1×1 projection skip); every other block keeps the shape, and every stream
position whose next block keeps the shape — and every stage end — is a candidate for a zero-output
insertion. Init: PyTorch's defaults for conv/linear drawn under the seed, BatchNorm γ=1, β=0.

This model is trained with plain backprop (it is not a credit-assignment subject), so it exposes
``forward(x, return_states=True)`` → ``(logits, [h_0, …, h_L])`` and ``candidates()``.
"""

import copy

import torch
import torch.nn.functional as F
from torch import nn


class BasicBlock(nn.Module):
    """``relu(bn2(conv2(relu(bn1(conv1(h))))) + skip(h))``."""

    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.skip = None
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def features(self, h: torch.Tensor) -> torch.Tensor:
        """ψ(h) = relu(bn1(conv1(h))), the input of the output projection (conv2 + bn2), (B, C, H, W)."""
        return F.relu(self.bn1(self.conv1(h)))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """The next stream state (this block adds its own skip)."""
        out = self.bn2(self.conv2(self.features(h)))
        return F.relu(out + (h if self.skip is None else self.skip(h)))

    def output_layers(self) -> list[nn.Module]:
        """Zeroing bn2's affine makes the residual branch exactly 0 (eval mode)."""
        return [self.bn2]

    def normalized(self, h: torch.Tensor) -> torch.Tensor:
        """``n`` = bn2's normalised input in eval mode, (B, C, H, W).

        With bn2's γ = β = 0 (a zero block) the branch is ``γ_c·n_c + β_c`` per channel, so its tangent space at
        that origin is channel c's span of ``{n_c, 1}``.
        """
        bn = self.bn2
        z = self.conv2(self.features(h))
        return (z - bn.running_mean[None, :, None, None]) / torch.sqrt(bn.running_var + bn.eps)[None, :, None, None]


class ResNetCIFAR(nn.Module):
    """Stem conv → stages of BasicBlocks → global average pool → linear."""

    def __init__(self, num_classes: int = 10, extra: int = 0, seed: int = 0, in_ch: int = 3, base_width: int = 16):
        super().__init__()
        torch.manual_seed(seed)  # conv/linear default init under the run's seed
        self.widths = widths = tuple(base_width * m for m in (1, 2, 4))  # 16/32/64 by default
        per_stage = [1 + sum(1 for i in range(extra) if i % 3 == s) for s in range(3)]
        self.stem = nn.Sequential(nn.Conv2d(in_ch, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]),
                                  nn.ReLU())
        blocks, cin = [], widths[0]
        for s, (w, n) in enumerate(zip(widths, per_stage, strict=True)):
            for j in range(n):
                blocks.append(BasicBlock(cin, w, 2 if (s > 0 and j == 0) else 1))
                cin = w
        self.blocks = nn.ModuleList(blocks)
        self.head = nn.Linear(widths[-1], num_classes)
        self.extra = extra

    def forward(self, x: torch.Tensor, return_states: bool = False):
        """Logits, or ``(logits, [h_0..h_L])``."""
        h = self.stem(x)
        states = [h]
        for b in self.blocks:
            h = b(h)
            states.append(h)
        logits = self.head(F.adaptive_avg_pool2d(h, 1).flatten(1))
        return (logits, states) if return_states else logits

    def candidates(self) -> list[int]:
        """Stream positions l where a shape-preserving block can be inserted after h_l (all of them)."""
        return list(range(len(self.blocks) + 1))

    def width_at(self, pos: int) -> int:
        """Channels of h_pos."""
        return self.widths[0] if pos == 0 else self.blocks[pos - 1].conv2.out_channels

    def stage_end(self, stage: int) -> int:
        """The stream position after the last block of ``stage`` (0, 1, 2)."""
        return max(i + 1 for i, b in enumerate(self.blocks) if b.conv2.out_channels == self.widths[stage])

    @torch.no_grad()
    def zero_block(self, position: int, seed: int = 0) -> BasicBlock:
        """The block :meth:`insert_zero_block` puts after h_position: conv/BN init under ``seed``, bn2 γ = β = 0.

        One tangent space (SPEC §4): V (:func:`depthaudit.depth.growth.resnet_value`), ``grow`` and the
        gradient-matched insertion all use this block; its first-order directions are bn2's γ and β.
        """
        torch.manual_seed(seed)
        c = self.width_at(position)
        p = next(self.parameters())
        blk = BasicBlock(c, c).to(device=p.device, dtype=p.dtype)
        blk.bn2.weight.zero_()
        blk.bn2.bias.zero_()
        return blk

    @torch.no_grad()
    def fit_matched_block(self, position: int, seed: int, hs: list, gs: list, alpha: float) -> "ResNetCIFAR":
        """The gradient-matched insertion's fit in this tangent space: bn2's γ_c, β_c (branch = γ_c·n_c + β_c).

        ``hs``/``gs``: the stream states at ``position`` and their per-example gradients, per analysis batch. The
        zero block of :meth:`zero_block` is inserted and its γ, β fitted per channel by least squares so the
        branch, as the ReLU after the residual sum passes it, is ``≈ −α·g``. Returns the grown copy (eval mode).
        """
        grown = self.insert_zero_block(position, seed).eval()
        blk = grown.blocks[position]
        c = hs[0].shape[1]
        n = torch.cat([blk.normalized(h) for h in hs]).double().transpose(0, 1).reshape(c, -1)  # (C, P)
        t = torch.cat([-alpha * g * (h > 0) for h, g in zip(hs, gs, strict=True)])  # what the branch sees
        t = t.double().transpose(0, 1).reshape(c, -1)
        nm, tm = n.mean(1), t.mean(1)
        den = ((n - nm[:, None]) ** 2).sum(1)
        gamma = torch.where(den > 0, ((n - nm[:, None]) * (t - tm[:, None])).sum(1) / den.clamp_min(1e-300), 0.0)
        blk.bn2.weight.copy_(gamma.to(blk.bn2.weight.dtype))  # per-channel least squares of γ·n + β ≈ t
        blk.bn2.bias.copy_((tm - gamma * nm).to(blk.bn2.bias.dtype))
        return grown

    @torch.no_grad()
    def insert_zero_block(self, position: int, seed: int = 0, inplace: bool = False) -> "ResNetCIFAR":
        """A fresh identity-shaped BasicBlock after h_position whose branch outputs exactly 0 (BN γ=β=0).

        Returns a modified copy, or with ``inplace`` this model (existing parameters keep their identity,
        so an optimizer can simply add the new block's parameters).
        """
        new = self if inplace else copy.deepcopy(self)
        blk = self.zero_block(position, seed)
        blocks = list(new.blocks)
        blocks.insert(position, blk)
        new.blocks = nn.ModuleList(blocks)
        return new
