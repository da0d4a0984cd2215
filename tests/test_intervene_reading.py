"""The intervention page reads the published claim per method off its own rows (hand-built rows, known verdicts)."""

from depthaudit.report.intervene import reading_md


def _row(method, *cells):
    """cells: (λ, D1, D2, D3, Γ mean) with statuses PASS/FLAG (D3 may be None: no frozen pair)."""
    by = []
    for lam, d1, d2, d3, g in cells:
        by.append({"lambda": lam, "D1": {"status": d1}, "D2": {"status": d2},
                   "D3": {"status": d3 if d3 else "not measured"}, "cos_mean": {"mean": g}})
    return {"method": method, "by_lambda": by}


def test_each_methods_reading_names_what_its_rows_show():
    res = {"rows": [
        _row("claim", (0.0, "FLAG", "FLAG", "FLAG", 0.1), (1e-2, "PASS", "PASS", "FLAG", 0.12),
             (0.1, "PASS", "PASS", "FLAG", 0.11)),
        _row("partly", (0.0, "FLAG", "PASS", "FLAG", 0.13), (1e-4, "PASS", "PASS", "PASS", 0.19),
             (0.1, "PASS", "PASS", "FLAG", 0.26)),
        _row("stuck", (0.0, "PASS", "FLAG", "FLAG", 0.05), (1e-2, "PASS", "FLAG", "FLAG", 0.05)),
        _row("healthy", (0.0, "PASS", "PASS", "PASS", 1.0), (1e-2, "PASS", "PASS", "PASS", 1.0)),
        _row("nozero", (1e-2, "PASS", "PASS", "PASS", 0.5)),
        _row("nofrozen", (0.0, "FLAG", "PASS", None, 0.2), (1e-2, "PASS", "PASS", None, 0.3)),
    ]}
    md = reading_md(res)
    print(md)
    lines = {ln.split("**")[1]: ln for ln in md.splitlines() if ln.startswith("- **")}
    assert lines["claim"].endswith("Mode 1 at λ = 0 (D1 and D2 FLAG); D1 and D2 pass at λ = 0.01, 0.1; D3 at λ = 0: "
                                   "FLAG; D3 flags at λ = 0.01, 0.1; Γ mean/layer 0.10 at λ = 0, 0.11–0.12 at λ > 0: "
                                   "the published reading holds at every λ > 0.")
    assert "D3 passes at λ = 0.0001" in lines["partly"]
    assert lines["partly"].endswith("the published reading holds at λ = 0.1, does not hold at λ = 0.0001.")
    assert "(D2 FLAG), and no λ > 0 clears it" in lines["stuck"]
    assert lines["stuck"].endswith("Γ mean/layer 0.05 at λ = 0, 0.05 at λ > 0: the published reading does not hold "
                                   "at λ = 0.01.")
    assert "no Mode 1 at λ = 0 (D1, D2 pass), so nothing for the penalty to restore" in lines["healthy"]
    assert "published reading" not in lines["healthy"]
    assert lines["nozero"].endswith("needs λ = 0 and some λ > 0 to compare; not read.")
    assert "D3 at λ = 0 not measured; D3 not measured at λ = 0.01 (no frozen-blocks pair)" in lines["nofrozen"]
    assert lines["nofrozen"].endswith("the published reading cannot be checked at λ = 0.01 (no D3).")
