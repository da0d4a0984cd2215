"""ViT-Mini (SPEC §1): patch tokens, pre-LN transformer blocks (attention + MLP), terminal LN, head.

One audited block is both residual sub-layers: ``f(h) = a + m`` with ``a = Attn(LN1(h))`` and
``m = MLP(LN2(h + a))``, so ``h_l = h_{l-1} + f_l(h_{l-1})`` as for every model. Images (C, H, W) are cut
into p×p patches, sequences (L,) into length-p pieces; a learned position embedding is added.

Variants (``--variant``):

* ``ref`` (default) — the published protocol's ViT-Mini: a learned **cls token** prepended to the patch
  tokens, block LayerNorms with their affine γ, β, terminal LN, head on the **cls token** ``h_L[:, 0]``;
  the audit reads D1/D2 on the cls-token state as the reference does (``audit_token = 0``). Linear layers
  PyTorch's default init (weight and bias U(±1/√fan_in)); cls token and position embedding N(0, 0.02²)
  (SPEC does not give these; ours).
* ``v0.1`` — depthaudit 0.1's ViT (ours): no cls token, affine-free block LNs, zero biases, head on the
  mean over tokens.

FA passes through attention: feedback matrices replace the transposes of Q, K, V, O, fc1 and fc2;
softmax, GELU and LayerNorm derivatives stay exact (:meth:`ViTBlock.fa_vjp`, tested against autograd).
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from .base import ResidualModel
from .functional import gelu_vjp, init_linear_, layer_norm_input_vjp, layer_norm_stats
from .resmlp import LN_EPS, MODELS, LNReadout, _bias, check_variant


class PatchEmbed(nn.Module):
    """(B, C, H, W) or (B, L) → (B, T, d) tokens plus a learned position embedding."""

    def __init__(self, input_shape, d: int, patch: int, gen: torch.Generator, variant: str = "v0.1"):
        super().__init__()
        self.input_shape, self.patch = tuple(input_shape), patch
        if len(self.input_shape) == 3:
            c, hh, ww = self.input_shape
            if hh % patch or ww % patch:
                raise ValueError(f"image {hh}×{ww} is not divisible by patch {patch}")
            tokens, pdim = (hh // patch) * (ww // patch), c * patch * patch
        else:
            n = math.prod(self.input_shape)
            if n % patch:
                raise ValueError(f"sequence length {n} is not divisible by patch {patch}")
            tokens, pdim = n // patch, patch
        self.proj = nn.Linear(pdim, d)
        init_linear_(self.proj, gen, bias=_bias(variant))
        self.cls = nn.Parameter(torch.randn(1, 1, d, generator=gen) * 0.02) if variant == "ref" else None
        self.pos = nn.Parameter(torch.randn(tokens + (self.cls is not None), d, generator=gen) * 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Tokens ``h_0``, (B, T, d)."""
        p = self.patch
        if len(self.input_shape) == 3:
            b, c, hh, ww = x.shape  # (B, C, H, W) -> (B, T, C·p·p)
            x = x.reshape(b, c, hh // p, p, ww // p, p).permute(0, 2, 4, 1, 3, 5).reshape(b, -1, c * p * p)
        else:
            x = x.reshape(x.shape[0], -1, p)
        t = self.proj(x)  # (B, T, d)
        if self.cls is not None:  # (B, 1 + T, d), cls first
            t = torch.cat([self.cls.expand(t.shape[0], -1, -1), t], dim=1)
        return t + self.pos


class ViTBlock(nn.Module):
    """Pre-LN transformer block; ``forward`` returns the update ``f(h) = a + m`` (not ``h + f``)."""

    def __init__(self, d: int, heads: int, ratio: int, gen: torch.Generator, causal: bool = False,
                 variant: str = "v0.1"):
        super().__init__()
        if d % heads:
            raise ValueError(f"the width {d} (--d-hidden, d_hidden) is not divisible by its {heads} attention heads; "
                             f"give a multiple of {heads}, e.g. {max(heads, d - d % heads)}")
        self.d, self.heads, self.causal = d, heads, causal
        affine = variant == "ref"
        self.ln1 = nn.LayerNorm(d, eps=LN_EPS) if affine else None
        self.ln2 = nn.LayerNorm(d, eps=LN_EPS) if affine else None
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.fc1, self.fc2 = nn.Linear(d, ratio * d), nn.Linear(ratio * d, d)
        for lin in (self.q, self.k, self.v, self.o, self.fc1, self.fc2):
            init_linear_(lin, gen, bias=_bias(variant))

    @staticmethod
    def _affine(ln):
        return (ln.weight, ln.bias) if ln is not None else (None, None)

    def _split(self, t):  # (B, T, d) -> (B, H, T, dh)
        b, n, _ = t.shape
        return t.view(b, n, self.heads, self.d // self.heads).transpose(1, 2)

    def _merge(self, t):  # (B, H, T, dh) -> (B, T, d)
        b, _, n, _ = t.shape
        return t.transpose(1, 2).reshape(b, n, self.d)

    def forward_cached(self, h: torch.Tensor):
        """``f(h)`` and what the feedback VJP needs (all detached)."""
        u1 = F.layer_norm(h, (self.d,), *self._affine(self.ln1), eps=LN_EPS)
        q, k, v = self._split(self.q(u1)), self._split(self.k(u1)), self._split(self.v(u1))
        s = q @ k.transpose(-2, -1) / math.sqrt(self.d // self.heads)  # (B, H, T, T)
        if self.causal:  # position t attends to positions ≤ t; masked probabilities are exactly 0
            n = s.shape[-1]
            s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
        p = torch.softmax(s, dim=-1)
        a = self.o(self._merge(p @ v))
        h2 = h + a
        z = self.fc1(F.layer_norm(h2, (self.d,), *self._affine(self.ln2), eps=LN_EPS))  # (B, T, r·d)
        f = a + self.fc2(F.gelu(z))
        hd, h2d = h.detach(), h2.detach()
        cache = (hd, layer_norm_stats(hd, LN_EPS), q.detach(), k.detach(), v.detach(), p.detach(), h2d,
                 layer_norm_stats(h2d, LN_EPS), z.detach())
        return f, cache

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """The block's update ``f(h)``, (B, T, d) → (B, T, d)."""
        return self.forward_cached(h)[0]

    def feedback_weights(self) -> dict[str, torch.Tensor]:
        """The weights whose transposes FA replaces."""
        return {n: getattr(self, n).weight for n in ("q", "k", "v", "o", "fc1", "fc2")}

    def output_layers(self) -> list[nn.Linear]:
        """Zeroing both sub-layers' output projections makes ``f(h) = 0`` exactly."""
        return [self.o, self.fc2]

    def tangent_features(self, h: torch.Tensor) -> torch.Tensor:
        """With ``o = fc2 = 0`` (a zero block): ``[c, ψ, 1]``, (positions, d + r·d + 1), both sub-layers' directions.

        ``c`` = the attention context ``softmax(qkᵀ/√dh)·v`` (what ``o``'s weight multiplies), ``ψ = GELU(fc1(LN2(h)))``
        (what ``fc2``'s weight multiplies; the MLP sees ``h`` itself since ``o = 0``), and one column of ones for
        the two output biases (the same direction). No other parameter has a gradient at that origin.
        """
        u1 = F.layer_norm(h, (self.d,), *self._affine(self.ln1), eps=LN_EPS)
        q, k, v = self._split(self.q(u1)), self._split(self.k(u1)), self._split(self.v(u1))
        s = q @ k.transpose(-2, -1) / math.sqrt(self.d // self.heads)  # (B, H, T, T)
        if self.causal:
            n = s.shape[-1]
            s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
        c = self._merge(torch.softmax(s, dim=-1) @ v).reshape(-1, self.d)  # (B·T, d)
        psi = F.gelu(self.fc1(F.layer_norm(h, (self.d,), *self._affine(self.ln2), eps=LN_EPS)))
        psi = psi.reshape(-1, self.fc1.out_features)  # (B·T, r·d)
        return torch.cat([c, psi, c.new_ones(c.shape[0], 1)], 1)

    @torch.no_grad()
    def set_tangent(self, w: torch.Tensor) -> None:
        """Set ``o`` and ``fc2`` from a solution ``w`` ((d + r·d + 1) × d) over :meth:`tangent_features`."""
        d = self.d
        self.o.weight.copy_(w[:d].T.to(self.o.weight.dtype))
        self.o.bias.zero_()
        self.fc2.weight.copy_(w[d:-1].T.to(self.fc2.weight.dtype))
        self.fc2.bias.copy_(w[-1].to(self.fc2.bias.dtype))

    @torch.no_grad()
    def fa_vjp(self, cache, g: torch.Tensor, fb: dict[str, torch.Tensor]) -> torch.Tensor:
        """``J_fᵀ g`` with every ``Wᵀ → B``: ``J_fᵀ g = v + J_aᵀ(g + v)``, ``v = J_mᵀ g`` (m sees h + a)."""
        h, st1, q, k, v, p, h2, st2, z = cache
        g1, g2 = self._affine(self.ln1)[0], self._affine(self.ln2)[0]  # LN γ: diagonal, derivative exact
        vm = layer_norm_input_vjp(h2, gelu_vjp(z, g @ fb["fc2"]) @ fb["fc1"], g2, LN_EPS, st2)
        dy = self._split((g + vm) @ fb["o"])  # (B, H, T, dh)
        dp = dy @ v.transpose(-2, -1)  # (B, H, T, T)
        dv = p.transpose(-2, -1) @ dy
        ds = p * (dp - (dp * p).sum(-1, keepdim=True)) / math.sqrt(self.d // self.heads)  # exact softmax
        dq, dk = ds @ k, ds.transpose(-2, -1) @ q
        du1 = self._merge(dq) @ fb["q"] + self._merge(dk) @ fb["k"] + self._merge(dv) @ fb["v"]
        return vm + layer_norm_input_vjp(h, du1, g1, LN_EPS, st1)


class PooledLNReadout(LNReadout):
    """Terminal LayerNorm ``out_ln`` → mean over tokens → ``out_head``."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """Logits (B, C) from tokens (B, T, d)."""
        return self.out_head(self.out_ln(h).mean(1))

    @torch.no_grad()
    def fa_vjp(self, h: torch.Tensor, e: torch.Tensor, fb: dict[str, torch.Tensor]) -> torch.Tensor:
        """Credit at every token of ``h_L``: feedback head, exact mean-pool and LN derivatives."""
        g = (e @ fb["out_head"]).unsqueeze(1).expand_as(h) / h.shape[1]
        return layer_norm_input_vjp(h, g, self.out_ln.weight, LN_EPS)


class ClsLNReadout(LNReadout):
    """Terminal LayerNorm ``out_ln`` → the cls token ``[:, 0]`` → ``out_head``."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """Logits (B, C) from tokens (B, 1 + T, d)."""
        return self.out_head(self.out_ln(h[:, 0]))

    @torch.no_grad()
    def fa_vjp(self, h: torch.Tensor, e: torch.Tensor, fb: dict[str, torch.Tensor]) -> torch.Tensor:
        """Credit at ``h_L``: feedback head and exact LN derivative at the cls token, zero elsewhere."""
        out = torch.zeros_like(h)
        out[:, 0] = layer_norm_input_vjp(h[:, 0], e @ fb["out_head"], self.out_ln.weight, LN_EPS)
        return out


@MODELS.register("vit", width_multiple=4)  # (its width splits over 4 attention heads)
class ViTMini(ResidualModel):
    """ViT-Mini: ``--d-hidden`` token width, ``--num-blocks`` blocks, ``--mlp-ratio`` (4); 4 heads, patch 4."""

    def __init__(self, input_shape, num_classes: int, d_hidden: int = 128, num_blocks: int = 4,
                 mlp_ratio: int | None = None, seed: int = 0, heads: int = 4, patch: int = 4, variant: str = "ref"):
        super().__init__()
        check_variant(variant)
        gen = torch.Generator().manual_seed(seed)
        self.embed = PatchEmbed(input_shape, d_hidden, patch, gen, variant)
        self.blocks = nn.ModuleList(ViTBlock(d_hidden, heads, mlp_ratio or 4, gen, variant=variant)
                                    for _ in range(num_blocks))
        readout = ClsLNReadout if variant == "ref" else PooledLNReadout
        self.readout = readout(d_hidden, num_classes, gen, variant)
        self.audit_token = 0 if variant == "ref" else None  # D1/D2 read h[:, 0], as the reference does
