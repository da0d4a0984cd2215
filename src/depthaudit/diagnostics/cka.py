"""Linear CKA to BP per layer (Kornblith et al. 2019): how far a method's representations are from BP's.

``CKA(X, Y) = ‖Yᵀ X‖_F² / (‖Xᵀ X‖_F ‖Yᵀ Y‖_F)`` on column-centred (N, D) matrices, in fp64: 1 for X against
itself, invariant to orthogonal rotations and isotropic scaling of either (the laws the tests check).

**The BP reference** is a BP-trained twin: the same architecture, config and seed trained with ``bp``, read at
the same probe inputs. The audit has one whenever ``bp`` is among ``--methods`` (every default audit): after all
runs finished, each method's trained run (seed s) and BP's trained run (seed s) are loaded from their stored
``checkpoint.pt`` in the audit's run store and compared on seed s's probe batches
(``experiments.audit.cka_to_bp``). Without a BP run in the audit, no CKA is reported (never against a model
trained elsewhere). From Python, pass any reference model: ``CKAToBP(reference=model).compute(snapshot)``.
"""

import torch

from ..recipe import trace_forward
from ..verdicts import mean_std
from .base import Diagnostic, Snapshot, layer_headers, per_layer_rows, register


def linear_cka(x: torch.Tensor, y: torch.Tensor) -> float:
    """Linear CKA of (N, Dx) and (N, Dy) (flattened from dim 1), fp64; 0 when either is constant."""
    x, y = x.flatten(1).double(), y.flatten(1).double()
    x, y = x - x.mean(0), y - y.mean(0)
    den = (x.mT @ x).norm() * (y.mT @ y).norm()
    return ((y.mT @ x).norm() ** 2 / den).item() if den > 0 else 0.0


@register
class CKAToBP(Diagnostic):
    """Per stream position ``l = 0..L``: linear CKA between the method's ``h_l`` and a BP twin's, same inputs."""

    name = "cka_to_bp"
    order = 100

    def __init__(self, every: int = 1, reference=None):
        super().__init__(every)
        self.reference = reference

    @classmethod
    def from_plan(cls, plan: dict) -> "CKAToBP | None":
        """Scheduled only when the plan carries a reference model (``cka_reference``).

        The audit measures it once, after training, from the stored BP twin (``experiments.audit.cka_to_bp``).
        """
        ref = plan.get("cka_reference")
        return cls(plan["every"], ref) if ref is not None else None

    def compute(self, snap: Snapshot) -> dict:
        """``per_layer`` CKA(h_l, h_l^BP) over every probe example and their ``mean``."""
        ref = []
        for x, _ in snap.batches:
            with torch.no_grad():
                ref.append([h.float() for h in trace_forward(self.reference, x).states])
        ref = [torch.cat(hs) for hs in zip(*ref, strict=True)]
        per = [linear_cka(a, b) for a, b in zip(snap.states, ref, strict=True)]
        return {"per_layer": per, "mean": sum(per) / len(per)}

    @classmethod
    def summarise(cls, finals: list[dict], num_blocks: int) -> dict:
        """Mean ± std over seeds of each layer's CKA (when measured)."""
        vals = [cls.read(p) for p in finals]
        if not vals or not all(v.get("per_layer") for v in vals):
            return {}
        return {"cka_to_bp": [mean_std([v["per_layer"][i] for v in vals]) for i in range(num_blocks + 1)]}

    @classmethod
    def section(cls, report: dict, table) -> tuple[str, str] | None:
        """The per-layer CKA table, for the methods that have one."""
        if not any(m.get("cka_to_bp") for m in report["methods"]):
            return None
        sub = {**report, "methods": [m for m in report["methods"] if m.get("cka_to_bp")]}
        return ("Linear CKA to BP per layer (each method's stream states vs its BP-trained twin's, same seed and probe "
                "inputs), end of training", table(layer_headers(sub), per_layer_rows(sub, "cka_to_bp")))

