"""Helpers shared by test files (imported as ``from _util import …``; pytest puts tests/ on the path)."""

import json


def without_wallclock(runs: dict) -> dict:
    """Run records minus wall-clock fields and where they were trained: what two equal runs share exactly."""
    runs = json.loads(json.dumps(runs))
    for rec in runs.values():
        for k in ("started_at", "written_at", "argv", "executor"):
            rec["provenance"].pop(k, None)
        rec.pop("timing")
        for h in rec["history"]:
            h.pop("seconds")
    return runs


def exact_remaining(model):
    """A State Bridge predictor that is the true remaining network: ``G(h, pos, e) = h_L`` from ``h`` at ``pos``."""
    def remaining(h, pos, e):
        for blk in model.blocks[pos:]:
            h = h + blk(h)
        return h

    return remaining
