"""The monitor and the verdicts read the same measurements: they must agree (stored runs and a fresh audit)."""

import json
import math
import pathlib

from depthaudit.cli import main

ROOT = pathlib.Path(__file__).parent.parent


def _first(history: list, measured: list, fires) -> int | None:
    """The first measured epoch whose probe makes ``fires`` true, recomputed from the stored history."""
    for h in history:
        if h["epoch"] in measured and "probe" in h and fires(h["probe"]):
            return h["epoch"]
    return None


def _check_run(rec: dict) -> int:
    """Monitor firings equal the first threshold crossings in the run's own history; returns checks made."""
    mon = rec.get("monitor")
    if not mon or not mon.get("measured_epochs"):
        return 0
    hist = [{"epoch": 0, "probe": rec["probe_init"]}] + rec["history"] if rec.get("probe_init") else rec["history"]
    rho_max, g_min = mon["rho_max"], mon["g_min"]
    by_epoch = {h["epoch"]: h.get("probe") for h in hist}
    def num(v):  # a record stores a non-finite measurement as null (a diverged run's NaN/inf)
        return math.nan if v is None else v

    for d, value, fires in (("D1", lambda p: num(p["stream"]["rho"]), lambda v: not v <= rho_max),
                            ("D2", lambda p: num(p["reference"]["g_L"]), lambda v: not v >= g_min)):
        first = _first(hist, mon["measured_epochs"], lambda p: fires(value(p)))  # noqa: B023
        got = mon["fired"][d]
        assert (got["epoch"] if isinstance(got, dict) else got) == first, (d, got, first)
        if first is not None and isinstance(got, dict):  # and the value it fired on is that epoch's measurement
            v = value(by_epoch[first])
            assert num(got["value"]) == v or (math.isnan(num(got["value"])) and math.isnan(v)), (d, got, v)
    return 1


def _check_report(rep: dict, runs_dir: pathlib.Path) -> int:
    """A final-state D1/D2 FLAG (one seed) means the monitor fired by the last epoch; a PASS that it is not firing."""
    n = 0
    for m in rep["methods"]:
        for d, bad in (("D1", lambda v, t: v > t), ("D2", lambda v, t: v < t)):
            c = m["checks"].get(d) if isinstance(m.get("checks"), dict) else None
            if not c or c.get("value") is None or c.get("n") != 1:
                continue
            v = c["value"]
            assert (c["status"] == "FLAG") == bool(bad(v, c["threshold"]) or (isinstance(v, float) and math.isnan(v)))
            fired = m["monitor"][d]["first_fired_epoch"][0]
            if c["status"] == "FLAG":
                assert fired is not None, (m["method"], d)  # flagged at the end: the monitor saw it happen
            n += 1
    return n


def test_stored_runs_monitor_equals_their_history():
    runs = reports = 0
    for res in ROOT.glob("docs/results/*/runs/*/result.json"):
        runs += _check_run(json.loads(res.read_text()))
    for rep in ROOT.glob("docs/results/*/report.json"):
        reports += _check_report(json.loads(rep.read_text()), rep.parent / "runs")
    print(f"monitor = history in {runs} stored runs; final verdicts consistent with the monitor in {reports} checks")
    assert runs >= 20 and reports >= 10


def test_fresh_audit_where_d1_fires_agrees(tmp_path):
    """A threshold that the stream crosses during training: the monitor's epoch is the history's first crossing."""
    out = tmp_path / "a"
    assert main(["audit", "--methods", "dfa", "bp", "--epochs", "3", "--d-hidden", "16", "--num-blocks", "2",
                 "--probe-batches", "1", "--probe-batch-size", "64", "--rho-max", "1.02", "--out", str(out)]) == 0
    recs = [json.loads(p.read_text()) for p in (out / "runs").glob("*/result.json")]
    checked = sum(_check_run(r) for r in recs)
    fired = [r["monitor"]["fired"]["D1"] for r in recs if r.get("monitor")]
    print("D1 fired at epochs:", fired)
    assert checked == 2 and any(e is not None for e in fired)  # fired: {"epoch", "value"} or None
    assert _check_report(json.loads((out / "report.json").read_text()), out / "runs") >= 2
