"""Functional credit measurements of the reference (SPEC §3): they do not depend on BP's magnitude.

* :class:`PerturbationCorrelation`: M random unit directions ``v`` per example at each ``h_l`` (M = 32,
  step ε = 1e-3); the Pearson correlation, over all (direction, example) pairs, between the predicted loss
  change ``⟨c_{l,b}, εv⟩`` and the true one ``ℓ_b(h_l + εv) − ℓ_b(h_l)`` (the rest of the network re-run from
  ``h_l``). A credit equal to the gradient tends to 1 as ε → 0.
* :class:`Nudging`: the mean loss change when ``h_l`` moves by ``−η·ĉ_l`` (η = 0.01), ``ĉ_l = c_l/rms(c_l)`` — the
  recipe's normalised credit (the normalisation is ours: SPEC gives no scale). Negative = downhill.
* :class:`FreshBNull`: the standard cosine Γ_l recomputed with ``n`` freshly drawn feedback sets (n = 20):
  the chance level a trained method's Γ must beat; ``z_l = (Γ_l − mean)/std``. Only for methods with random
  feedback (``CreditMethod.random_feedback``); the CLI refuses it for the others.

They run on the first probe batch only and at the end of training by default (``every = 0``): each costs
many partial forward passes. They are measured only when the tracking plan asks for them (``audit
--functional``); :class:`PerturbationCorrelation` brings the three's summary and card section.
"""

import math

import torch
import torch.nn.functional as F

from ..recipe import output_error, rms
from ..seeds import derive_seed
from ..verdicts import fmt_ms, mean_std
from .base import Diagnostic, Snapshot, layer_headers, register
from .credit_cosine import standard_cosines


def loss_from(model, pos: int, h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-example loss ``ℓ_b`` (B,) when the stream is set to ``h`` at position ``pos`` (0..L)."""
    return F.cross_entropy(model.readout(model.stream(h, pos)[-1]), y, reduction="none")


def pearson(a: torch.Tensor, b: torch.Tensor) -> float:
    """Pearson correlation of two flat tensors (fp64); NaN when either is constant."""
    a, b = a.double().flatten() - a.double().mean(), b.double().flatten() - b.double().mean()
    den = a.norm() * b.norm()
    return (a @ b / den).item() if den > 0 else math.nan


def _first_batch(snap: Snapshot):
    """(x, y, states, credits) of the first probe batch."""
    n = snap.batches[0][0].shape[0]
    return snap.batches[0][1], [h[:n] for h in snap.states], [c[:n] for c in snap.credits]


@register
class PerturbationCorrelation(Diagnostic):
    """Pearson r between predicted and true loss changes under random ε-perturbations of ``h_l``."""

    name = "perturbation_correlation"
    order = 60

    def __init__(self, every: int = 0, directions: int = 32, step: float = 1e-3, seed: int = 0):
        super().__init__(every)
        self.directions, self.step, self.seed = directions, step, seed

    @classmethod
    def from_plan(cls, plan: dict) -> "PerturbationCorrelation | None":
        """With the plan's ``functional`` measurements only."""
        f = plan.get("functional")
        return cls(f["every"], f["directions"], f["step"], f["seed"]) if f else None

    @classmethod
    def summarise(cls, finals: list[dict], num_blocks: int) -> dict:
        """The functional measurements' seed means per layer (this family's summary); None when not measured."""
        return {"functional": _functional_summary(finals, num_blocks)}

    @classmethod
    def section(cls, report: dict, table) -> tuple[str, str] | None:
        """The functional measurements' table, when any method has them."""
        rows = _functional_rows(report)
        if not rows:
            return None
        return ("Functional credit measurements (end of training, first probe batch; r → 1 and Δℓ < 0 = a useful "
                "credit)", table(["method", "measure", *layer_headers(report)[1:]], rows))

    def compute(self, snap: Snapshot) -> dict:
        """``per_layer`` r_l for l = 0..L and their mean."""
        y, states, credits = _first_batch(snap)  # (the snapshot's traces need autograd: fetched first)
        with torch.no_grad():
            return self._measure(snap.model, y, states, credits)

    def _measure(self, model, y, states, credits) -> dict:
        gen = torch.Generator().manual_seed(derive_seed(self.seed, "perturbation"))
        out = []
        dtype = next(model.parameters()).dtype
        for pos, (h, c) in enumerate(zip(states, credits, strict=True)):
            h, c = h.to(dtype), c.to(dtype)
            base = loss_from(model, pos, h, y)  # (B,)
            pred, true = [], []
            for _ in range(self.directions):
                v = torch.randn(h.shape, generator=gen).to(h)
                v = v / v.flatten(1).norm(dim=1).view(-1, *[1] * (v.dim() - 1))  # unit per example
                pred.append((c * v).flatten(1).sum(1) * self.step)
                true.append(loss_from(model, pos, h + self.step * v, y) - base)
            out.append(pearson(torch.cat(pred), torch.cat(true)))
        return {"per_layer": out, "mean": sum(out) / len(out), "directions": self.directions, "step": self.step}


@register
class Nudging(Diagnostic):
    """Mean loss change when ``h_l`` moves by ``−η·c_l/rms(c_l)``; negative means the credit points downhill."""

    name = "nudging"
    order = 70

    def __init__(self, every: int = 0, eta: float = 0.01):
        super().__init__(every)
        self.eta = eta

    @classmethod
    def from_plan(cls, plan: dict) -> "Nudging | None":
        """With the plan's ``functional`` measurements only."""
        f = plan.get("functional")
        return cls(f["every"], f["eta"]) if f else None

    def compute(self, snap: Snapshot) -> dict:
        """``per_layer`` Δℓ for l = 0..L and the fraction of layers that go downhill."""
        y, states, credits = _first_batch(snap)
        model, out = snap.model, []
        dtype = next(model.parameters()).dtype
        with torch.no_grad():
            for pos, (h, c) in enumerate(zip(states, credits, strict=True)):
                h, c = h.to(dtype), c.to(dtype)
                moved = loss_from(model, pos, h - self.eta * c / rms(c), y)
                out.append((moved - loss_from(model, pos, h, y)).mean().item())
        return {"per_layer": out, "downhill_fraction": sum(d < 0 for d in out) / len(out), "eta": self.eta}


@register
class FreshBNull(Diagnostic):
    """Γ_l with ``n`` fresh feedback draws: the chance level; the trained method's z-score against it."""

    name = "fresh_b_null"
    order = 80
    needs_method = True  # redraws the method's feedback

    def __init__(self, every: int = 0, draws: int = 20, seed: int = 0):
        super().__init__(every)
        self.draws, self.seed = draws, seed

    @classmethod
    def from_plan(cls, plan: dict) -> "FreshBNull | None":
        """With the plan's ``functional`` measurements and at least one draw."""
        f = plan.get("functional")
        return cls(f["every"], f["fresh_b_draws"], f["seed"]) if f and f["fresh_b_draws"] > 0 else None

    def compute(self, snap: Snapshot) -> dict:
        """Per layer: null mean and std over draws, the method's Γ_l and ``z``."""
        method = snap.method
        if not getattr(method, "random_feedback", False):
            return {"refused": f"method {method.name or type(method).__name__} has no random feedback to redraw"}
        y, states, credits = _first_batch(snap)
        bp = snap.batch_size
        ref = [g[:y.shape[0]] for g in snap.reference]
        mine = standard_cosines(credits, ref, bp, snap.eps)
        device = next(snap.model.parameters()).device
        tr = snap.traces[0]
        null = []
        for i in range(self.draws):
            fresh = method.redrawn(snap.model, derive_seed(self.seed, f"fresh-feedback-{i}")).to(device)
            cs = [c.detach().float() for c in fresh.checked_credits(snap.model, tr, output_error(tr.logits, y))]
            null.append(standard_cosines(cs, ref, bp, snap.eps))
        t = torch.tensor(null, dtype=torch.float64)  # (draws, L+1)
        mean = t.mean(0)
        std = t.std(0) if self.draws > 1 else torch.full_like(mean, math.nan)  # (one draw has no spread: said
        # as "—", without torch's degrees-of-freedom warning on stderr: walk 29 case 189)
        z = [(m - a) / s if s > 0 else math.nan for m, a, s in zip(mine, mean.tolist(), std.tolist(), strict=True)]
        return {"per_layer": mine, "null_mean": mean.tolist(), "null_std": std.tolist(), "z": z, "draws": self.draws}


def _functional_summary(finals: list[dict], num_blocks: int) -> dict | None:
    """Seed means per layer of the functional measurements, when they were taken."""
    if not any(PerturbationCorrelation.name in p for p in finals):
        return None

    def per_layer(d: type[Diagnostic], key: str):
        vals = [d.read(p).get(key) for p in finals]
        vals = [v for v in vals if v is not None]
        return [mean_std([v[i] for v in vals]) for i in range(num_blocks + 1)] if vals else None

    fb = [FreshBNull.read(p) for p in finals]
    refused = next((f["refused"] for f in fb if "refused" in f), None)
    return {"perturbation_correlation": per_layer(PerturbationCorrelation, "per_layer"),
            "nudging": per_layer(Nudging, "per_layer"),
            "fresh_b_null": None if refused or not any(fb) else {
                "trained": per_layer(FreshBNull, "per_layer"),  # the trained Γ on the first probe batch: z's
                "null_mean": per_layer(FreshBNull, "null_mean"), "null_std": per_layer(FreshBNull, "null_std"),
                "z": per_layer(FreshBNull, "z")},
            "fresh_b_refused": refused or (None if any(fb) else "not measured")}


def _functional_rows(report: dict) -> list[list[str]]:
    rows = []
    for m in report["methods"]:
        f = m.get("functional")
        if not f:
            continue
        L1 = len(f["nudging"] or [])
        rows.append([m["method"], "perturbation r", *(fmt_ms(v) for v in f["perturbation_correlation"] or [])])
        rows.append([m["method"], "nudge Δℓ", *(fmt_ms(v, ".2e") for v in f["nudging"] or [])])
        fb = f.get("fresh_b_null")
        if fb:
            if fb.get("trained"):  # z = (this − null mean) / null std, each shown (walk 27 case 156: z was not
                rows.append([m["method"], "Γ, probe batch 1", *(fmt_ms(v) for v in fb["trained"])])  # checkable)
            rows.append([m["method"], "fresh-B null Γ", *(fmt_ms(v) for v in fb["null_mean"])])
            if fb.get("null_std"):
                rows.append([m["method"], "fresh-B null std", *(fmt_ms(v) for v in fb["null_std"])])
            rows.append([m["method"], "z vs null", *(fmt_ms(v, ".1f") for v in fb["z"])])
        else:
            rows.append([m["method"], "fresh-B null", f["fresh_b_refused"], *[""] * (L1 - 1)])
    return rows
