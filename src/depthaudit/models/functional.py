"""Hand-written vector-Jacobian products that feedback methods need (exact nonlinearity/LN derivatives).

Feedback alignment replaces weight transposes but keeps every other derivative exact, so these
compute the exact VJP of the parameter-free parts; each is tested against autograd.
"""

import torch
from torch import nn


def layer_norm_stats(x: torch.Tensor, eps: float):
    """``(mean, rstd)`` of LayerNorm over the last dim, shaped (..., 1), from the fused kernel."""
    _, mean, rstd = torch.native_layer_norm(x, x.shape[-1:], None, None, eps)
    return mean, rstd


def layer_norm_input_vjp(x: torch.Tensor, g: torch.Tensor, weight: torch.Tensor | None, eps: float,
                         stats=None) -> torch.Tensor:
    """Exact ∂/∂x of ``LayerNorm(x)`` (over the last dim) applied to cotangent ``g``.

    Args:
        x: the LayerNorm input, (..., d).
        g: cotangent at the LayerNorm output, (..., d).
        weight: the elementwise affine weight γ (d,), or None.
        eps: the LayerNorm epsilon.
        stats: ``(mean, rstd)`` from the forward (see :func:`layer_norm_stats`); recomputed if None.
    """
    mean, rstd = stats if stats is not None else layer_norm_stats(x, eps)
    # fused kernel: rstd · (g' − mean(g') − x̂·mean(g'·x̂)) with g' = g·γ
    return torch.ops.aten.native_layer_norm_backward(
        g, x, x.shape[-1:], mean, rstd, weight, None, [True, False, False])[0]


def gelu_vjp(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Exact (erf) GELU derivative at pre-activation ``a`` applied to ``g``."""
    return torch.ops.aten.gelu_backward(g, a)


def init_linear_(lin: nn.Linear, gen: torch.Generator, bias: str = "zero") -> None:
    """Weights U(±1/√fan_in), drawn from ``gen``; biases zero or (``bias="default"``) U(±1/√fan_in).

    ``bias="default"`` is exactly the distribution of PyTorch's own ``nn.Linear`` init (kaiming-uniform
    with a=√5 gives the weight bound 1/√fan_in; the bias bound is 1/√fan_in too).
    """
    bound = lin.in_features**-0.5
    with torch.no_grad():
        lin.weight.uniform_(-bound, bound, generator=gen)
        if lin.bias is not None:
            if bias == "default":
                lin.bias.uniform_(-bound, bound, generator=gen)
            else:
                lin.bias.zero_()


def feedback_like(weight: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """A fixed random feedback matrix with ``weight``'s shape and init distribution U(±1/√fan_in)."""
    bound = weight.shape[1] ** -0.5
    out = torch.empty(weight.shape, dtype=weight.dtype)
    out.uniform_(-bound, bound, generator=gen)
    return out.to(weight.device)
