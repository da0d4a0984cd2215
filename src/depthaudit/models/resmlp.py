"""ResMLP (terminal LayerNorm readout) and StudentNet (no terminal LN), SPEC §1.

Two named variants (``--variant``), both drawn from one generator seeded by the run's seed, in module order:

* ``ref`` (default) — **the published protocol's model**: block = ``LayerNorm(d)`` with its affine γ, β →
  ``Linear(d, r·d)`` → GELU → ``Linear(r·d, d)``, expansion ``r = 1`` by default; the second Linear's weight
  ~ N(0, 0.01²) and its bias 0 (small init for the residual branch); every other Linear (embedding, first
  block Linear, head) PyTorch's default init: weight and bias U(±1/√fan_in). LayerNorms γ=1, β=0.
* ``v0.1`` — depthaudit 0.1's own model (ours, kept so old results stay reproducible): affine-free block
  LayerNorm, every Linear weight U(±1/√fan_in) with zero bias, expansion 4 by default.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..registry import Registry
from .base import ResidualModel
from .functional import gelu_vjp, init_linear_, layer_norm_input_vjp

MODELS: Registry = Registry("arch", meta_keys=("width_multiple",))
LN_EPS = 1e-5
VARIANTS = ("ref", "v0.1")
FC2_STD = 0.01  # the reference's residual-branch output init, N(0, 0.01²)


def check_variant(variant: str) -> None:
    """Reject an unknown variant name (the CLI's choices come from :data:`VARIANTS`)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of {', '.join(VARIANTS)}")


def _bias(variant: str) -> str:
    return "default" if variant == "ref" else "zero"


class MLPBlock(nn.Module):
    """Pre-LN MLP block: LN → Linear(d, r·d) → GELU → Linear(r·d, d) (see the module docstring for init)."""

    def __init__(self, d: int, ratio: int, gen: torch.Generator, variant: str = "ref"):
        super().__init__()
        check_variant(variant)
        self.d = d
        self.ln = nn.LayerNorm(d, eps=LN_EPS) if variant == "ref" else None  # γ=1, β=0
        self.fc1 = nn.Linear(d, ratio * d)
        self.fc2 = nn.Linear(ratio * d, d)
        init_linear_(self.fc1, gen, bias=_bias(variant))
        if variant == "ref":
            with torch.no_grad():
                self.fc2.weight.normal_(0.0, FC2_STD, generator=gen)
                self.fc2.bias.zero_()
        else:
            init_linear_(self.fc2, gen)

    def _ln_params(self):
        return (self.ln.weight, self.ln.bias) if self.ln is not None else (None, None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The block's update ``f(x)``, (B, d) → (B, d)."""
        w, b = self._ln_params()
        return self.fc2(F.gelu(self.fc1(F.layer_norm(x, (self.d,), w, b, eps=LN_EPS))))

    def forward_cached(self, x: torch.Tensor):
        """Forward that also returns ``(x, mean, rstd, a)``: LN input and stats, GELU pre-activation."""
        w, b = self._ln_params()
        # one fused LN kernel; it also yields the statistics the feedback VJP reuses
        u, mean, rstd = torch.native_layer_norm(x.detach() if w is None else x, (self.d,), w, b, LN_EPS)
        if x.requires_grad and w is None:  # keep the input path differentiable when a caller asks for it
            u = F.layer_norm(x, (self.d,), eps=LN_EPS)
        a = self.fc1(u)  # (B, r·d)
        return self.fc2(F.gelu(a)), (x.detach(), (mean.detach(), rstd.detach()), a.detach())

    def feedback_weights(self) -> dict[str, torch.Tensor]:
        """The weights whose transposes FA replaces (the LN affine γ is diagonal: its derivative stays exact)."""
        return {"fc1": self.fc1.weight, "fc2": self.fc2.weight}

    def output_layers(self) -> list[nn.Linear]:
        """The layers whose zeroing makes the block output exactly 0 (function-preserving insertion)."""
        return [self.fc2]

    def tangent_features(self, h: torch.Tensor) -> torch.Tensor:
        """With ``fc2 = 0`` (a zero block): ``[ψ(h), 1]``, the features of ``fc2``'s weight and bias, (n, r·d + 1).

        ``ψ(h) = GELU(fc1(LN(h)))``; at that origin no other parameter has a gradient, so these span the
        block's first-order directions (see :mod:`depthaudit.depth.insert`).
        """
        w, b = self._ln_params()
        psi = F.gelu(self.fc1(F.layer_norm(h, (self.d,), w, b, eps=LN_EPS))).reshape(-1, self.fc1.out_features)
        return torch.cat([psi, psi.new_ones(psi.shape[0], 1)], 1)

    @torch.no_grad()
    def set_tangent(self, w: torch.Tensor) -> None:
        """Set the output projection from a solution ``w`` ((r·d + 1) × d) over :meth:`tangent_features`."""
        self.fc2.weight.copy_(w[:-1].T.to(self.fc2.weight.dtype))
        self.fc2.bias.copy_(w[-1].to(self.fc2.bias.dtype))

    @torch.no_grad()
    def fa_vjp(self, cache, g: torch.Tensor, fb: dict[str, torch.Tensor]) -> torch.Tensor:
        """Input VJP with ``fc*.weightᵀ`` replaced by ``fb[...]``; GELU and LN (with γ) derivatives exact."""
        x, stats, a = cache
        dz = g @ fb["fc2"]  # (B, d) @ (d, r·d) -> (B, r·d)
        du = gelu_vjp(a, dz) @ fb["fc1"]  # (B, r·d) @ (r·d, d) -> (B, d)
        return layer_norm_input_vjp(x, du, self._ln_params()[0], LN_EPS, stats)


class LNReadout(nn.Module):
    """Terminal LayerNorm ``out_ln`` then linear ``out_head``."""

    def __init__(self, d: int, num_classes: int, gen: torch.Generator, variant: str = "ref"):
        super().__init__()
        self.out_ln = nn.LayerNorm(d, eps=LN_EPS)
        self.out_head = nn.Linear(d, num_classes)
        init_linear_(self.out_head, gen, bias=_bias(variant))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """Logits (B, C) from ``h_L`` (B, d)."""
        return self.out_head(self.out_ln(h))

    def feedback_weights(self) -> dict[str, torch.Tensor]:
        """The weights whose transposes FA replaces."""
        return {"out_head": self.out_head.weight}

    @torch.no_grad()
    def fa_vjp(self, h: torch.Tensor, e: torch.Tensor, fb: dict[str, torch.Tensor]) -> torch.Tensor:
        """Credit at ``h_L`` from output error ``e`` (B, C) through feedback; LN derivative exact."""
        return layer_norm_input_vjp(h, e @ fb["out_head"], self.out_ln.weight, LN_EPS)


class LinearReadout(nn.Module):
    """Head directly on ``h_L`` (StudentNet: Mode 1 cannot occur)."""

    def __init__(self, d: int, num_classes: int, gen: torch.Generator, variant: str = "ref"):
        super().__init__()
        self.out_head = nn.Linear(d, num_classes)
        init_linear_(self.out_head, gen, bias=_bias(variant))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """Logits (B, C) from ``h_L`` (B, d)."""
        return self.out_head(h)

    def feedback_weights(self) -> dict[str, torch.Tensor]:
        """The weights whose transposes FA replaces."""
        return {"out_head": self.out_head.weight}

    @torch.no_grad()
    def fa_vjp(self, h: torch.Tensor, e: torch.Tensor, fb: dict[str, torch.Tensor]) -> torch.Tensor:
        """Credit at ``h_L``: ``e @ B``."""
        return e @ fb["out_head"]


class FlattenLinear(nn.Module):
    """Embedding: flatten the input, one Linear to the stream width."""

    def __init__(self, in_features: int, d: int, gen: torch.Generator, variant: str = "ref"):
        super().__init__()
        self.proj = nn.Linear(in_features, d)
        init_linear_(self.proj, gen, bias=_bias(variant))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``h_0``, (B, *input_shape) → (B, d)."""
        return self.proj(x.flatten(1))


DEFAULT_RATIO = {"ref": 1, "v0.1": 4}  # the block's expansion when --mlp-ratio is not given


class _ResMLPBase(ResidualModel):
    readout_cls: type = LNReadout
    stackable = True  # no buffers: R runs can train stacked (batched.py)

    def __init__(self, input_shape, num_classes: int, d_hidden: int = 256, num_blocks: int = 4,
                 mlp_ratio: int | None = None, seed: int = 0, variant: str = "ref"):
        super().__init__()
        check_variant(variant)
        ratio = mlp_ratio or DEFAULT_RATIO[variant]
        gen = torch.Generator().manual_seed(seed)
        self.embed = FlattenLinear(math.prod(input_shape), d_hidden, gen, variant)
        self.blocks = nn.ModuleList(MLPBlock(d_hidden, ratio, gen, variant) for _ in range(num_blocks))
        self.readout = self.readout_cls(d_hidden, num_classes, gen, variant)


@MODELS.register("resmlp")
class ResMLP(_ResMLPBase):
    """Pre-LN residual MLP with terminal ``out_ln`` + ``out_head`` (the primary audit arch)."""

    readout_cls = LNReadout


@MODELS.register("studentnet")
class StudentNet(_ResMLPBase):
    """The same blocks with the head directly on ``h_L`` (no terminal LN): the Mode-1 control."""

    readout_cls = LinearReadout
