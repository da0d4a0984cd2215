"""Stream norms and ρ (D1), and the norm of the BP reference fed to the cosine (D2)."""

from .base import Diagnostic, Probe


class StreamNorms(Diagnostic):
    """``‖h_l‖`` (mean per-example norm) for l = 0..L, the ratios ``‖h_l‖/‖h_{l-1}‖`` and ρ = their max."""

    name = "stream"

    def compute(self, probe: Probe) -> dict:
        """``norms``, ``ratios`` and ``rho``."""
        norms = [h.flatten(1).norm(dim=1).mean().item() for h in probe.states]
        ratios = [b / a if a > 0 else float("inf") for a, b in zip(norms, norms[1:], strict=False)]
        return {"norms": norms, "ratios": ratios, "rho": max(ratios) if ratios else 1.0}


class ReferenceNorm(Diagnostic):
    """``‖g_l‖`` of the exact reference tensor over the whole probe batch; ``g_L`` is what D2 checks."""

    name = "reference"

    def compute(self, probe: Probe) -> dict:
        """``norms`` per layer and ``g_L``."""
        norms = [g.norm().item() for g in probe.reference]
        return {"norms": norms, "g_L": norms[-1]}
