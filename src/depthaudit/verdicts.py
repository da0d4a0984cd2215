"""The audit's checks (SPEC §3): value, threshold, PASS/FLAG and calibration margin.

Margins are signed so that positive means "on the passing side", in the unit a reader compares by:
decades (log10) for the scale checks D1 and D2, percentage points for D3.
"""

import math
import re
import statistics
from dataclasses import asdict, dataclass

from .fields import arg, check_ranges, check_types


@dataclass(frozen=True)
class Thresholds:
    """Defaults from SPEC §3; every one is a CLI flag."""

    rho_max: float = arg(50.0, help="D1 flag when ρ > X", lo=0, lo_open=True, metavar="X",
                         group="measurement and thresholds")
    eps: float = arg(1e-8, help="cosine floor ε", lo=0, lo_open=True, metavar="X")
    ref_factor: float = arg(10.0, help="D2 flag when ‖g_L‖ < X·ε", lo=0, lo_open=True, metavar="X", advanced=True)
    gap_min_pp: float = arg(2.0, help="D3 flag when gap < X pp", flag="gap-min", metavar="X")

    def __post_init__(self):
        check_types(self)  # Thresholds(rho_max=-1) or eps=nan from Python: refused as the CLI refuses the flags
        check_ranges(self)

    def to_dict(self) -> dict:
        """JSON-able."""
        return asdict(self)


def _check(value, threshold, flag: bool, margin, flag_when: str, unit: str) -> dict:
    return {"value": value, "threshold": threshold, "flag_when": flag_when, "status": "FLAG" if flag else "PASS",
            "margin": margin, "margin_unit": unit}


def _decades(a: float, b: float) -> float:
    """log10(a / b), with the limits spelled out for zero, infinite and NaN inputs."""
    if math.isnan(a) or math.isnan(b):
        return math.nan
    if a <= 0 or math.isinf(b):
        return -math.inf
    if b <= 0 or math.isinf(a):
        return math.inf
    return math.log10(a / b)


def check_d1(rho: float, th: Thresholds) -> dict:
    """D1 scale stability: ρ = max_l ‖h_l‖/‖h_{l-1}‖; non-finite ρ is a FLAG."""
    flag = not math.isfinite(rho) or rho > th.rho_max
    return _check(rho, th.rho_max, flag, _decades(th.rho_max, rho), "value > threshold", "decades")


def check_d2(g_l: float, th: Thresholds) -> dict:
    """D2 reference validity: ‖g_L‖ of the tensor fed to the cosine vs ``ref_factor · eps``."""
    limit = th.ref_factor * th.eps
    flag = not math.isfinite(g_l) or g_l < limit
    return _check(g_l, limit, flag, _decades(g_l, limit), "value < threshold", "decades")


def check_d3(gap_pp: float, th: Thresholds) -> dict:
    """D3 depth utility: accuracy gap (pp) of trained over the frozen-blocks baseline."""
    gap_pp = _pp(gap_pp)  # (a mean over seeds: float noise)
    flag = not math.isfinite(gap_pp) or gap_pp < th.gap_min_pp
    return _check(gap_pp, th.gap_min_pp, flag, _pp(gap_pp - th.gap_min_pp), "value < threshold", "pp")


def accuracy_gap_pp(trained_acc: float, frozen_acc: float) -> float:
    """Trained minus frozen test accuracy in percentage points (accuracies are fractions).

    Rounded to 1e-9 pp: accuracies are counts over one test set, so a gap is a multiple of 100/N pp, and a gap of
    exactly 2 pp must not fall under a 2 pp floor by float rounding (walk 15 case 70: 0.208 − 0.188 gave
    1.9999999999999991 and a FLAG printed as "+2.0000000000000").
    """
    return _pp(100.0 * (trained_acc - frozen_acc))


def _pp(x: float) -> float:
    """``x`` (pp) without float noise below 1e-9 pp (non-finite values as they are)."""
    return round(x, 9) if math.isfinite(x) else x


def mean_std(values: list) -> dict:
    """``{"mean", "std", "n"}`` with the sample std (ddof = 1); std is None for n < 2; None values skipped."""
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return {"mean": None, "std": None, "n": 0}
    finite = all(math.isfinite(v) for v in vals)
    std = statistics.stdev(vals) if len(vals) > 1 and finite else None
    return {"mean": statistics.fmean(vals) if finite else math.nan, "std": std, "n": len(vals)}


def standard_pair_alarm(test_acc: float | None, gamma: float | None, chance: float, th: Thresholds) -> list[str]:
    """What would make a reader of the standard pair alone walk a method back (ours; README "Decision table").

    The pair raises an alarm only on its own evidence: accuracy within ``gap_min_pp`` of chance, or an
    aggregate cosine Γ ≤ 0 (no better aligned with BP than an unrelated direction). Empty = no alarm.
    """
    why = []
    if test_acc is None or not math.isfinite(test_acc) or _pp(100.0 * (test_acc - chance)) < th.gap_min_pp:
        why.append("accuracy at chance")
    if gamma is None or not math.isfinite(gamma) or gamma <= 0.0:
        why.append("Γ ≤ 0")
    return why


def decision_table(methods: list[dict], chance: float, th: Thresholds) -> dict:
    """Per method: would the standard pair walk it back, would the protocol (any of D1/D2/D3 flagged)?"""
    rows = []
    for m in methods:
        sp = m["standard_pair"]
        alarm = standard_pair_alarm(sp["test_acc"]["mean"], sp["aggregate_cosine_mean_per_layer"]["mean"], chance, th)
        if sp["test_acc"].get("n") == 0 and (m.get("diverged") or {}).get("excluded_seeds"):
            alarm = ["diverged"]  # no number to read: every seed diverged, which either reader sees
        elif sp["test_acc"].get("n") == 0 and m["checks"]["D3"].get("why") == "stopped before training":
            alarm = ["no accuracy: stopped before training"]  # (not "at chance": nothing was measured, walk 38 W1)
        rows.append({"method": m["method"], "standard_pair_walks_back": bool(alarm), "standard_pair_why": alarm,
                     "protocol_walks_back": bool(m["flags"]), "protocol_flags": list(m["flags"])})
    n = len(rows)
    sp_n = sum(r["standard_pair_walks_back"] for r in rows)
    pr_n = sum(r["protocol_walks_back"] for r in rows)
    return {"chance_acc": chance, "rows": rows, "standard_pair_count": sp_n, "protocol_count": pr_n, "n": n,
            "summary": f"the standard pair walks back {sp_n} of {n} methods; the protocol {pr_n} of {n}"}


def fmt_num(x: float, fmt: str) -> str:
    """``format(x, fmt)``, except that a ``g`` format keeps its trailing zeros: 1.0034 in ``.3g`` is ``1.00``.

    (Plain ``.3g`` prints ``1``, which reads as an exact value beside cells printed ``1.02``.)
    """
    m = re.fullmatch(r"([+ ]?)\.(\d+)g", fmt)
    if m is None or not math.isfinite(x):
        return format(x, fmt)
    text = format(x, f"{m[1]}#.{m[2]}g")
    return text[:-1] if text.endswith(".") else text  # `#` keeps a bare point too: 123. → 123


def agreeing(x: float, fmt: str, agrees) -> str:
    """``x`` in ``fmt`` (``+.1f``, ``.3g``, ``.2e``), with the digits it takes for the printed number to agree.

    Up to 12 more digits, until the printed number satisfies ``agrees``: a cell never reads as the other side of
    its threshold.
    """
    text = fmt_num(x, fmt)
    m = re.fullmatch(r"([+ ]?)\.(\d+)([fge])", fmt)
    if m is None or not math.isfinite(x):
        return text
    for extra in range(13):
        text = fmt_num(x, f"{m[1]}.{int(m[2]) + extra}{m[3]}")
        if agrees(float(text)):
            break
    return text


def check_cells(c: dict, fmt: str) -> tuple[str, str]:
    """A check's value and margin as printed: ``("+1.95", "-0.05")`` for a D3 gap of 1.95 pp under a 2 pp floor.

    The value shows the digits that keep it on its verdict's side of the threshold (a FLAG under ``value <
    threshold`` never prints as the threshold itself), the margin those that keep its sign (negative for a FLAG).
    """
    flagged = c["status"] == "FLAG"
    th = c.get("threshold")
    below = c.get("flag_when", "value < threshold") == "value < threshold"
    v = "—" if c["value"] is None else fmt_num(c["value"], fmt) if th is None else agreeing(
        c["value"], fmt, lambda p: (p < th if below else p > th) == flagged)
    m = "—" if c["margin"] is None else agreeing(  # a margin that is not zero never prints as one (walk 26 case
        c["margin"], "+.1f", lambda p: (p < 0) == flagged and (p != 0 or c["margin"] == 0))  # 68: "+0.0" for 0.001)
    if c.get("margin_unit") == "pp" and th is not None and "—" not in (v, m) and fmt.endswith("f") \
            and math.isfinite(c["value"]) and math.isfinite(c["margin"]):  # an additive margin: the printed pair
        for d in range(max(_decimals(v), _decimals(m)), 13):  # adds up to the threshold (walk 25 case 40: "+1.4
            v2, m2 = format(c["value"], f"+.{d}f"), format(c["margin"], f"+.{d}f")  # FLAG (-0.7)" under 2 pp)
            if abs(float(v2) - float(m2) - th) < 0.5 * 10.0 ** -d and ((float(v2) < th if below else float(v2) > th)
                                                                      == flagged) and (float(m2) < 0) == flagged:
                v, m = (v2 if fmt.startswith("+") else v2.lstrip("+")), m2
                break
    return v, m


def _decimals(text: str) -> int:
    return len(text.split(".", 1)[1]) if "." in text else 0


def fmt_ms(ms: dict | None, fmt: str = ".3f") -> str:
    """``0.389 ± 0.001`` (or just the mean when n < 2); ``—`` when missing."""
    if not ms or ms.get("mean") is None:
        return "—"
    s = format(ms["mean"], fmt)
    return s if ms.get("std") is None else f"{s} ± {format(ms['std'], fmt.replace('+', ''))}"  # a std has no sign
