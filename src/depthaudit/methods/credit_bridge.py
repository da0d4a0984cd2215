"""Credit Bridge (SPEC §2; one of the published audit's five methods): credit = gradient of a learned value.

A scalar value network ``V_φ(h_l, t_l, s)`` (input ``[LN(h_l), t_l, s]``, ``t_l`` a learned embedding of the
depth l, ``s = e`` the output error) estimates the per-example loss still to come from the state ``h_l``.
It trains alongside the network, one Adam step per recipe step on the batch's detached states, on

* **bridge consistency** (l = 0..L−1): ``V(h_l)`` regresses onto a target network's value of the next state
  under small noise, ``softmin_k V̄(h_{l+1} + σ·ξ_k, t_{l+1}, s)`` over K noise draws (SPEC: σ ≈ 0.1, a soft-min
  over draws);
* the **terminal value** ``V(h_L) = ℓ_b`` and **terminal gradient matching**
  ``‖∇_h V(h_L) − ∂ℓ_b/∂h_L‖² / ‖∂ℓ_b/∂h_L‖²`` (per example; SPEC: essential, without it the cosine falls to 0.03).

The credit is ``c_l = ∇_{h_l} V_φ(h_l, t_l, s)`` at every position l = 0..L.

Choices SPEC leaves open (ours, documented and recorded): V is a one-hidden-layer GELU MLP of width d applied
to each token/feature vector and summed over tokens (a scalar per example for any state shape); ``t_l`` of
width 16; K = 4 draws, soft-min temperature τ = 0.1 (``−τ log mean_k exp(−v_k/τ)``); the target network is a
Polyak average of V with rate 0.01 per step; Adam lr 1e-3; the three losses weighted equally. The conditioning
(``cond``) and where a block reads its credit (``credit_at``) are options shared with State Bridge
(:mod:`.state_bridge`).
"""

import copy

import torch
import torch.nn.functional as F
from torch import nn

from ..models.base import ResidualModel
from ..recipe import Trace
from .base import METHODS, CreditMethod
from .options import Option
from .state_bridge import CONDS, CREDIT_AT, ConditionedMLP, input_side


class ValueNet(ConditionedMLP):
    """``V(h, l, e) = Σ_tokens w₂ᵀ GELU(W₁ [LN(h), t_l, e] + b₁) + b₂``, one scalar per example."""

    def __init__(self, d: int, num_positions: int, num_classes: int, gen: torch.Generator, cond: str = "error"):
        super().__init__(d, num_positions, num_classes, 1, gen, zero_out=False, cond=cond)

    def forward(self, h: torch.Tensor, pos: int, e: torch.Tensor) -> torch.Tensor:
        """Values (B,) of states ``h`` (B, …, d) at stream position ``pos`` with output error ``e`` (B, C)."""
        v = self.mlp(h, pos, e).squeeze(-1)  # (B, …)
        return v.flatten(1).sum(1) if v.dim() > 1 else v


def softmin(v: torch.Tensor, tau: float, dim: int = 0) -> torch.Tensor:
    """``−τ log mean exp(−v/τ)`` along ``dim``: between the mean (τ → ∞) and the minimum (τ → 0)."""
    k = torch.tensor(float(v.shape[dim]), dtype=v.dtype, device=v.device)
    return -tau * (torch.logsumexp(-v / tau, dim=dim) - torch.log(k))


@METHODS.register("cb")
class CreditBridge(CreditMethod):
    """Learned value ``V_φ``; ``c_l = ∇_{h_l} V_φ(h_l, t_l, e)``."""

    growable = False  # an auxiliary network / wrapped method sized for a fixed depth

    name = "cb"
    needs_input_grad = True  # terminal gradient matching needs the exact ∂ℓ/∂h_L (Trace.gL)
    options = {"sigma": Option(0.1, "noise σ of the bridge-consistency target (SPEC ≈ 0.1)", lo=0, legacy="cb_sigma"),
               "draws": Option(4, "noise draws K of the soft-min (ours)", lo=1, legacy="cb_draws"),
               "tau": Option(0.1, "soft-min temperature τ (ours)", lo=0, lo_open=True),
               "lr": Option(1e-3, "value network's Adam learning rate (ours)", lo=0, lo_open=True),
               "polyak": Option(0.01, "target network's Polyak rate (ours)", lo=0, hi=1),
               "cond": Option("error", "conditioning s: error = the output error | none", choices=CONDS),
               "credit_at": Option("output", "output = block l trains on ∇V at h_l (ours) | input = at h_{l-1}, "
                                   "the reference's surrogate as written", choices=CREDIT_AT)}

    def __init__(self, model: ResidualModel, seed: int, sigma: float = 0.1, draws: int = 4, tau: float = 0.1,
                 lr: float = 1e-3, polyak: float = 0.01, cond: str = "error", credit_at: str = "output"):
        super().__init__(model, seed)
        self.cond, self.credit_at = cond, credit_at
        self.sigma, self.draws, self.tau, self.lr, self.polyak = float(sigma), int(draws), tau, lr, polyak
        self.value: nn.Module | None = None
        self.target: nn.Module | None = None
        self.opt, self.gen = None, None
        self._sums, self._steps = None, 0

    def _build(self, states: list[torch.Tensor], num_classes: int) -> None:
        h = states[0]
        self.value = ValueNet(h.shape[-1], len(states), num_classes, torch.Generator().manual_seed(self.seed),
                              self.cond)
        self.value.to(device=h.device, dtype=h.dtype)
        self.target = copy.deepcopy(self.value).requires_grad_(False)
        pending = getattr(self, "_pending", None)
        if pending:  # a checkpoint's value and target networks
            for name, net in (("value", self.value), ("target", self.target)):
                net.load_state_dict({k.split(".", 1)[1]: v.to(h.device) for k, v in pending.items()
                                     if k.startswith(name + ".")})
        self.opt = torch.optim.Adam(self.value.parameters(), lr=self.lr)
        self.gen = torch.Generator(device=h.device).manual_seed(self.seed)

    def value_grad(self, h: torch.Tensor, pos: int, e: torch.Tensor, create_graph: bool = False) -> torch.Tensor:
        """``∇_h Σ_b V(h_b, t_pos, e_b)`` = the per-example ``∇_{h_b} V`` (examples do not interact)."""
        with torch.enable_grad():
            x = h.detach().requires_grad_()
            (g,) = torch.autograd.grad(self.value(x, pos, e.detach()).sum(), x, create_graph=create_graph)
        return g

    def credits(self, model: ResidualModel, tr: Trace, e: torch.Tensor) -> list[torch.Tensor]:
        """``∇_h V`` at every stream position, h_L included (``credit_at="input"``: see :func:`input_side`)."""
        if self.value is None:
            self._build(tr.states, e.shape[1])
        cs = [self.value_grad(h, i, e) for i, h in enumerate(tr.states)]
        return input_side(cs) if self.credit_at == "input" else cs

    def losses(self, states: list[torch.Tensor], e: torch.Tensor, ell: torch.Tensor, gL: torch.Tensor) -> dict:
        """The three training losses on one batch (graphs to φ): consistency, terminal value, terminal gradient."""
        e = e.detach()
        L = len(states) - 1
        cons = []
        for i in range(L):
            nxt = states[i + 1].detach()
            with torch.no_grad():  # the regression target: soft-min over noisy next states of V̄
                noise = torch.randn((self.draws, *nxt.shape), generator=self.gen, device=nxt.device, dtype=nxt.dtype)
                v_next = torch.stack([self.target(nxt + self.sigma * n, i + 1, e) for n in noise])  # (K, B)
                tgt = softmin(v_next, self.tau)  # (B,)
            cons.append((self.value(states[i].detach(), i, e) - tgt).pow(2).mean())
        hL = states[-1].detach()
        value_L = (self.value(hL, L, e) - ell.detach()).pow(2).mean()
        g = self.value_grad(hL, L, e, create_graph=True)
        gL = gL.detach()
        den = gL.flatten(1).pow(2).sum(1).clamp_min(torch.finfo(gL.dtype).tiny)  # (B,)
        grad_L = ((g - gL).flatten(1).pow(2).sum(1) / den).mean()
        return {"consistency": sum(cons) / max(1, L), "terminal_value": value_L, "terminal_grad": grad_L}

    def train_value(self, states, e, ell, gL) -> torch.Tensor:
        """One Adam step on the summed losses, then the target's Polyak update; returns the losses (3,)."""
        with torch.enable_grad():
            parts = self.losses(states, e, ell, gL)
            total = sum(parts.values())
            self.opt.zero_grad(set_to_none=True)
            total.backward()
        self.opt.step()
        with torch.no_grad():
            for pt, pv in zip(self.target.parameters(), self.value.parameters(), strict=True):
                pt.lerp_(pv, self.polyak)
        return torch.stack([v.detach() for v in parts.values()])

    def learn(self, model, tr, e):
        """One value-network update on this batch's states, before the credits are taken."""
        if self.value is None:
            self._build(tr.states, e.shape[1])
        ell = F.cross_entropy(tr.logits.detach(), tr.y, reduction="none")  # (B,) per-example terminal value
        parts = self.train_value(tr.states, e, ell, tr.gL)
        self._sums = parts if self._sums is None else self._sums + parts  # on the device: no per-step sync
        self._steps += 1

    def epoch_stats(self) -> dict:
        """Mean of each value-network loss over the epoch's steps (reset after reading)."""
        if not self._steps:
            return {}
        vals = (self._sums / self._steps).tolist()  # sync point: once per epoch
        self._sums, self._steps = None, 0
        return dict(zip(("value_consistency", "value_terminal", "value_terminal_grad_nmse"), vals, strict=True))

    def state_dict(self):
        """Value and target networks (``value.*``, ``target.*``)."""
        if self.value is None:
            return {}
        return {f"{n}.{k}": v.detach().cpu().clone() for n, net in (("value", self.value), ("target", self.target))
                for k, v in net.state_dict().items()}

    def load_state_dict(self, state):
        """Restore both networks (built on first use)."""
        self._pending = dict(state)
