"""Table, page and figure of the scale-penalty intervention (`depthaudit intervene`)."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ..experiments.families import budget_text  # noqa: E402
from ..io import save_figure  # noqa: E402
from ..verdicts import check_cells  # noqa: E402
from .card import fmt_ms  # noqa: E402
from .published_audit import section5_md  # noqa: E402


def intervention_md(res: dict) -> str:
    """Per method and λ: D1, D2, D3, accuracy, mean cosine Γ, per-layer Γ_l."""
    def chk(c, fmt):
        return f"{check_cells(c, fmt)[0]} {c['status']}"  # the digits that keep the value on its verdict's side

    out = ["| method | λ | D1 ρ | D2 ‖g_L‖ | D3 gap pp | test acc | Γ mean/layer | per-layer Γ_l, l=0..L |",
           "|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        for d in r["by_lambda"]:
            out.append(f"| {r['method']} | {d['lambda']:g} | {chk(d['D1'], '.3g')} | {chk(d['D2'], '.2e')} | "
                       f"{chk(d['D3'], '+.1f')} | {fmt_ms(d['test_acc'])} | {fmt_ms(d['cos_mean'])} | "
                       + " ".join(fmt_ms(c, '.2f') for c in d["per_layer_cosine"]) + " |")
    return "\n".join(out)


def _lams(xs: list[float]) -> str:
    return ", ".join(f"{x:g}" for x in xs)


def reading_md(res: dict) -> str:
    """Per method, the published claim read off the table: does λ > 0 clear Mode 1 (D1, D2) while D3 stays flagged?

    The claim (SPEC §3): the penalty restores the reference's validity (Mode 1: D1/D2 pass again) without
    fixing deep-layer credit (Mode 2: D3 still flags). Each line states what the rows show, λ by λ.
    """
    out = []
    for r in res["rows"]:
        rows = {d["lambda"]: d for d in r["by_lambda"]}
        zero, pen = rows.get(0.0), sorted(x for x in rows if x > 0)
        if zero is None or not pen:
            out.append(f"- **{r['method']}**: needs λ = 0 and some λ > 0 to compare; not read.")
            continue
        st = {x: {k: rows[x][k]["status"] for k in ("D1", "D2", "D3")} for x in rows}
        flagged0 = [k for k in ("D1", "D2") if st[0.0][k] == "FLAG"]
        cleared = [x for x in pen if st[x]["D1"] == "PASS" and st[x]["D2"] == "PASS"]
        d3_flag = [x for x in pen if st[x]["D3"] == "FLAG"]
        d3_pass = [x for x in pen if st[x]["D3"] == "PASS"]
        d3_none = [x for x in pen if st[x]["D3"] not in ("PASS", "FLAG")]
        parts = [f"D3 at λ = 0: {st[0.0]['D3']}" if st[0.0]["D3"] in ("PASS", "FLAG") else "D3 at λ = 0 not measured"]
        if d3_flag:
            parts.append(f"D3 flags at λ = {_lams(d3_flag)}")
        if d3_pass:
            parts.append(f"D3 passes at λ = {_lams(d3_pass)}")
        if d3_none:
            parts.append(f"D3 not measured at λ = {_lams(d3_none)} (no frozen-blocks pair)")
        gam = [rows[x]["cos_mean"]["mean"] for x in pen if rows[x]["cos_mean"]["mean"] is not None]
        g0 = rows[0.0]["cos_mean"]["mean"]
        if g0 is not None and gam:  # Mode 2 read directly: the mean per-layer credit cosine
            span = f"{min(gam):.2f}" + (f"–{max(gam):.2f}" if f"{max(gam):.2f}" != f"{min(gam):.2f}" else "")
            parts.append(f"Γ mean/layer {g0:.2f} at λ = 0, {span} at λ > 0")
        d3 = "; ".join(parts)
        if not flagged0:
            out.append(f"- **{r['method']}**: no Mode 1 at λ = 0 (D1, D2 pass), so nothing for the penalty to "
                       f"restore; {d3}.")
            continue
        holds = [x for x in cleared if x in d3_flag]
        unknown = [x for x in cleared if x in d3_none]
        fails = [x for x in pen if x not in holds and x not in unknown]
        mode1 = (f"Mode 1 at λ = 0 ({' and '.join(flagged0)} FLAG); D1 and D2 pass at λ = {_lams(cleared)}"
                 if cleared else f"Mode 1 at λ = 0 ({' and '.join(flagged0)} FLAG), and no λ > 0 clears it")
        missed = [x for x in pen if x not in cleared]
        if cleared and missed:
            mode1 += f", not at {_lams(missed)}"
        if len(holds) == len(pen):
            verdict = "the published reading holds at every λ > 0"
        else:
            verdict = "the published reading " + ", ".join(
                ([f"holds at λ = {_lams(holds)}"] if holds else [])
                + ([f"does not hold at λ = {_lams(fails)}"] if fails else [])
                + ([f"cannot be checked at λ = {_lams(unknown)} (no D3)"] if unknown else []))
        out.append(f"- **{r['method']}**: {mode1}; {d3}: {verdict}.")
    return ("Published reading: the penalty clears Mode 1 (D1 and D2 pass again) while D3 stays flagged "
            "(deep-layer credit is not fixed).\n\n" + "\n".join(out))


def intervention_doc(res: dict, table: str) -> str:
    """The intervention's Markdown page: title (form, λ grid, configuration, budget), table and figure."""
    base = next(iter(res["audits"].values()))["config"]["base"]
    grid = ", ".join(f"{x:g}" for x in res["lambdas"])
    s5 = section5_md(res)
    beside = (f"## Beside the published §5\n\nThe study's 30-epoch cells (3 seeds, mean ± std, ddof 1); a cell is "
              f"reproduced within max(2 std, 2 pp).\n\n{s5}\n\n") if s5 else ""
    return (f"# Scale-penalty intervention ({res['penalty_form']} form, λ ∈ {grid}; {base['dataset']} {base['arch']} "
            f"d={base['d_hidden']} L={base['num_blocks']}, {budget_text(base)})\n\n{table}\n\n{beside}"
            f"## Reading, per method\n\n{reading_md(res)}\n\n![checks vs λ](intervention.png)\n")


def intervention_figure(res: dict, path: Path) -> None:
    """The checks against λ (symlog x: λ = 0 included), one line per method, thresholds dashed."""
    th = next(iter(res["audits"].values()))["thresholds"]
    fig, axes = plt.subplots(1, 4, figsize=(13, 3.2))
    panels = (("D1", "D1: ρ", True, th["rho_max"]), ("D2", "D2: ‖g_L‖", True, th["ref_factor"] * th["eps"]),
              ("D3", "D3: gap (pp)", False, th["gap_min_pp"]), ("test_acc", "test accuracy", False, None))
    for ax, (key, title, logy, thr) in zip(axes, panels, strict=True):
        for r in res["rows"]:
            lams = [d["lambda"] for d in r["by_lambda"]]
            vals = [(d[key]["value"] if key != "test_acc" else d[key]["mean"]) for d in r["by_lambda"]]
            ax.plot(lams, [float("nan") if v is None else v for v in vals], marker="o", label=r["method"])
        if thr is not None:
            ax.axhline(thr, ls="--", c="k", lw=1)
        ax.set_xscale("symlog", linthresh=1e-4)
        if logy:
            ax.set_yscale("log")
        ax.set_xlabel(f"λ ({res.get('penalty_form', 'abs')} penalty)")
        ax.set_title(title)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
