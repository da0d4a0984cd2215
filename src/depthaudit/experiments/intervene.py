"""The scale-penalty intervention (SPEC §3): the audit with and without λ, side by side.

The evidence it produces: whether the penalty restores D1/D2 (Mode 1) and whether D3 and the
per-layer cosines (Mode 2) move with it — reported as measured, whatever the data say.
"""

from dataclasses import replace
from pathlib import Path

from .audit import AuditConfig, run_audit


def run_intervention(acfg: AuditConfig, penalty: float, data, out: Path, log=print, argv=None, jobs: int = 1):
    """Two audits sharing one run store: λ = the base config's (normally 0) and λ = ``penalty``."""
    before = run_audit(acfg, data, out, log=log, argv=argv, jobs=jobs)
    after = run_audit(replace(acfg, base=replace(acfg.base, scale_penalty=penalty)), data, out, log=log,
                      argv=argv, jobs=jobs)
    rows = []
    for b, a in zip(before["methods"], after["methods"], strict=True):
        rows.append({"method": b["method"],
                     "before": {k: b["checks"][k] for k in ("D1", "D2", "D3")} | {
                         "test_acc": b["trained_test_acc"], "per_layer_cosine": b["per_layer_cosine"],
                         "cos_mean": b["standard_pair"]["aggregate_cosine_mean_per_layer"]},
                     "after": {k: a["checks"][k] for k in ("D1", "D2", "D3")} | {
                         "test_acc": a["trained_test_acc"], "per_layer_cosine": a["per_layer_cosine"],
                         "cos_mean": a["standard_pair"]["aggregate_cosine_mean_per_layer"]}})
    return {"schema": "depthaudit.intervention.v1", "penalty": penalty,
            "base_penalty": acfg.base.scale_penalty, "rows": rows, "before": before, "after": after}
