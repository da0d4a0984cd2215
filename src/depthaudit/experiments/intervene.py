"""The scale-penalty intervention (SPEC §2–§3): the audit over a λ grid, side by side.

The reference sweeps λ ∈ {0, 1e-4, 1e-2, 1e-1} of ``λ·‖f_l(h_{l-1})‖²`` (main value 1e-2) at 30 epochs.
The evidence it produces: whether the penalty restores D1/D2 (Mode 1) and whether D3 and the per-layer
cosines (Mode 2) move with it — reported as measured, whatever the data say.
"""

import math
from dataclasses import dataclass, replace
from pathlib import Path

from ..fields import refuse
from ..sweep import FolderStore, SweepStatus, run_sweep
from .audit import AuditConfig, audit_specs, run_audit

LAMBDAS = (0.0, 1e-4, 1e-2, 1e-1)


@dataclass(frozen=True)
class InterveneConfig:
    """The audit ``audit`` at every λ of ``lambdas`` (default: the reference's grid); it owns its rules.

    ``penalty=x`` is shorthand for ``lambdas=(0, x)`` (resolved into ``lambdas``; give one of them). λ comes from
    the grid only: a base ``scale_penalty`` is refused. The grid is counted once, in the order given.
    """

    audit: AuditConfig
    lambdas: tuple[float, ...] | None = None
    penalty: float | None = None
    # the penalty's form and reduction at every λ > 0 (a base config without a penalty keeps neither: walk 16
    # cases 128-134, where --penalty-form rel and --penalty-reduction element were dropped without a word)
    penalty_form: str = "abs"
    penalty_reduction: str = "example"

    def __post_init__(self):
        if not isinstance(self.audit, AuditConfig):  # (InterveneConfig(audit="bp"): named, not an AttributeError)
            raise refuse(self, f"{{audit}} must be an AuditConfig (e.g. da.AuditConfig(methods=('bp',))), got "
                         f"{type(self.audit).__name__}")
        from ..recipe import PENALTY_REDUCTIONS

        if self.penalty_form not in ("abs", "rel"):
            raise refuse(self, f"{{penalty_form}} {self.penalty_form!r} not known; use abs or rel")
        if self.penalty_reduction not in PENALTY_REDUCTIONS:
            raise refuse(self, f"{{penalty_reduction}} {self.penalty_reduction!r} not known; use one of "
                         f"{', '.join(PENALTY_REDUCTIONS)}")
        if self.penalty is not None and self.lambdas is not None:
            raise refuse(self, f"{{penalty}} {self.penalty:g} is shorthand for {{lambdas}} 0 {self.penalty:g}; "
                         "give one of them")
        if self.audit.base.scale_penalty:
            raise refuse(self, f"{{scale_penalty}} {self.audit.base.scale_penalty:g}: intervene sets λ from "
                         "{lambdas} (or {penalty}); drop {scale_penalty}")
        if self.penalty is not None and (isinstance(self.penalty, bool) or not isinstance(self.penalty, int | float)
                                         or not (self.penalty > 0 and math.isfinite(self.penalty))):
            raise refuse(self, f"{{penalty}} {self.penalty!r}: the penalized λ beside λ = 0 must be a number > 0 "
                         "(e.g. 0.01)")
        lams = LAMBDAS if self.lambdas is None else self.lambdas
        lams = (0.0, self.penalty) if self.penalty is not None else (lams,) if isinstance(lams, int | float) else lams
        if isinstance(lams, str | bytes):  # (iterated, a string would be its characters)
            raise refuse(self, f"{{lambdas}} must be numbers >= 0 (e.g. (0.0, 0.01)), got the string {lams!r}")
        if any(isinstance(x, bool) or not isinstance(x, int | float) or not (x >= 0 and math.isfinite(x))
               for x in lams):
            raise refuse(self, f"{{lambdas}} must be numbers >= 0, got {list(lams)}")
        if not lams:  # refused before the folder is claimed
            raise refuse(self, "{lambdas} is empty; give one or more λ >= 0, e.g. (0.0, 0.01)")
        object.__setattr__(self, "lambdas", tuple(sorted({float(x) for x in lams})))  # a grid: one order (walk
        # 20 W6: λ 0.1 0 "replaced the report of the grid λ ∈ 0, 0.1")
        if not any(self.lambdas) and (self.penalty_form, self.penalty_reduction) != ("abs", "example"):
            import warnings  # no λ > 0: no run has a penalty, so no form (walk 18 case 168: the title said "rel form")

            warnings.warn(f"InterveneConfig: penalty_form={self.penalty_form!r}/penalty_reduction="
                          f"{self.penalty_reduction!r} has no effect: every λ is 0; stored as abs/example",
                          UserWarning, stacklevel=3)
            object.__setattr__(self, "penalty_form", "abs")
            object.__setattr__(self, "penalty_reduction", "example")
        object.__setattr__(self, "penalty", None)  # resolved into the grid: one config for one grid

    @property
    def base(self):
        """The audit's base run config."""
        return self.audit.base


def _row(m: dict) -> dict:
    return {k: m["checks"][k] for k in ("D1", "D2", "D3")} | {
        "test_acc": m["trained_test_acc"], "per_layer_cosine": m["per_layer_cosine"],
        "cos_mean": m["standard_pair"]["aggregate_cosine_mean_per_layer"]}


def intervention_specs(acfg, lambdas, data, out, form: str = "abs", reduction: str = "example"):
    """``(grid, specs)``: the audit at each λ and every run of all of them, keyed ``lam{λ}/{audit key}``."""
    def at(lam):  # the audit at λ (its form and reduction: a zero penalty keeps the canonical ones)
        if not lam:  # (λ = 0 has no form: the canonical one, said nowhere)
            return replace(acfg, base=replace(acfg.base, scale_penalty=0.0, penalty_form="abs",
                                              penalty_reduction="example"))
        return replace(acfg, base=replace(acfg.base, scale_penalty=float(lam), penalty_form=form,
                                          penalty_reduction=reduction))

    grid = [at(lam) for lam in lambdas]
    specs = [replace(s, key=f"lam{g.base.scale_penalty:g}/{s.key}") for g in grid
             for s in audit_specs(g, data, Path(out) / "runs")]  # (checkpoints too: the CKA to BP reads them)
    return grid, specs


def run_intervention(acfg: AuditConfig, lambdas, data, out: Path, log=print, argv=None, jobs: int = 1,
                     batch_runs: int = 1, opts=None, form: str = "abs",
                     reduction: str = "example") -> dict | SweepStatus:
    """One audit per λ (all sharing one run store); rows per method and λ.

    Every λ's runs go through one sweep first, so with ``batch_runs > 1`` runs of different λ train stacked;
    each audit then finds its runs stored. A sweep that stopped short (``--list-cells``, ``--cell``) is returned
    as its :class:`~depthaudit.sweep.SweepStatus`.
    """
    grid, specs = intervention_specs(acfg, lambdas, data, out, form, reduction)
    status = run_sweep(specs, FolderStore(Path(out) / "runs", data.sha256), data=data, jobs=jobs, log=log, argv=argv,
                       run_log=lambda m: log("    " + m), batch_runs=batch_runs, opts=opts)
    if not status.complete:
        return status

    def found(m: str) -> None:  # each λ's audit finds the runs the sweep above just stored: not news
        if "runs already finished in" not in m:
            log(m)

    audits = {float(lam): run_audit(g, data, out, log=found, argv=argv, jobs=jobs, batch_runs=batch_runs,
                                    opts=opts)
              for lam, g in zip(lambdas, grid, strict=True)}
    rows = []
    for i, m in enumerate(acfg.methods):
        rows.append({"method": m, "by_lambda": [{"lambda": lam, **_row(a["methods"][i])} for lam, a in audits.items()]})
    return {"schema": "depthaudit.intervention.v2", "lambdas": list(audits), "penalty_form": form,
            "penalty_reduction": reduction, "rows": rows, "audits": {f"{lam:g}": a for lam, a in audits.items()}}
