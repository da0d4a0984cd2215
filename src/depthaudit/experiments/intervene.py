"""The scale-penalty intervention (SPEC §2–§3): the audit over a λ grid, side by side.

The reference sweeps λ ∈ {0, 1e-4, 1e-2, 1e-1} of ``λ·‖f_l(h_{l-1})‖²`` (main value 1e-2) at 30 epochs.
The evidence it produces: whether the penalty restores D1/D2 (Mode 1) and whether D3 and the per-layer
cosines (Mode 2) move with it — reported as measured, whatever the data say.
"""

from dataclasses import replace
from pathlib import Path

from ..sweep import FolderStore, SweepStatus, run_sweep
from .audit import AuditConfig, audit_specs, run_audit

LAMBDAS = (0.0, 1e-4, 1e-2, 1e-1)


def _row(m: dict) -> dict:
    return {k: m["checks"][k] for k in ("D1", "D2", "D3")} | {
        "test_acc": m["trained_test_acc"], "per_layer_cosine": m["per_layer_cosine"],
        "cos_mean": m["standard_pair"]["aggregate_cosine_mean_per_layer"]}


def run_intervention(acfg: AuditConfig, lambdas, data, out: Path, log=print, argv=None, jobs: int = 1,
                     batch_runs: int = 1, opts=None) -> dict | SweepStatus:
    """One audit per λ (all sharing one run store); rows per method and λ.

    Every λ's runs go through one sweep first, so with ``batch_runs > 1`` runs of different λ train stacked;
    each audit then finds its runs stored. A sweep that stopped short (``--list-cells``, ``--cell``) is returned
    as its :class:`~depthaudit.sweep.SweepStatus`.
    """
    grid = [replace(acfg, base=replace(acfg.base, scale_penalty=float(lam))) for lam in lambdas]
    specs = [replace(s, key=f"lam{g.base.scale_penalty:g}/{s.key}") for g in grid for s in audit_specs(g, data)]
    status = run_sweep(specs, FolderStore(Path(out) / "runs", data.sha256), data=data, jobs=jobs, log=log, argv=argv,
                       run_log=lambda m: log("    " + m), batch_runs=batch_runs, opts=opts)
    if not status.complete:
        return status
    audits = {float(lam): run_audit(replace(acfg, base=replace(acfg.base, scale_penalty=float(lam))), data, out,
                                    log=log, argv=argv, jobs=jobs, batch_runs=batch_runs, opts=opts)
              for lam in lambdas}
    rows = []
    for i, m in enumerate(acfg.methods):
        rows.append({"method": m, "by_lambda": [{"lambda": lam, **_row(a["methods"][i])} for lam, a in audits.items()]})
    return {"schema": "depthaudit.intervention.v2", "lambdas": list(audits), "penalty_form": acfg.base.penalty_form,
            "rows": rows, "audits": {f"{lam:g}": a for lam, a in audits.items()}}
