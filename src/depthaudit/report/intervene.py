"""Table, page and figure of the scale-penalty intervention (`depthaudit intervene`)."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ..io import save_figure  # noqa: E402
from .card import fmt_ms  # noqa: E402


def intervention_md(res: dict) -> str:
    """Per method and λ: D1, D2, D3, accuracy, mean cosine Γ, per-layer Γ_l."""
    def chk(c, fmt):
        return f"{format(c['value'], fmt) if c['value'] is not None else '—'} {c['status']}"

    out = ["| method | λ | D1 ρ | D2 ‖g_L‖ | D3 gap pp | test acc | Γ mean/layer | per-layer Γ_l, l=0..L |",
           "|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        for d in r["by_lambda"]:
            out.append(f"| {r['method']} | {d['lambda']:g} | {chk(d['D1'], '.3g')} | {chk(d['D2'], '.2e')} | "
                       f"{chk(d['D3'], '+.1f')} | {fmt_ms(d['test_acc'])} | {fmt_ms(d['cos_mean'])} | "
                       + " ".join(fmt_ms(c, '.2f') for c in d["per_layer_cosine"]) + " |")
    return "\n".join(out)


def intervention_doc(res: dict, table: str) -> str:
    """The intervention's Markdown page: title (form, λ grid, configuration, budget), table and figure."""
    base = next(iter(res["audits"].values()))["config"]["base"]
    grid = ", ".join(f"{x:g}" for x in res["lambdas"])
    return (f"# Scale-penalty intervention ({res['penalty_form']} form, λ ∈ {grid}; {base['dataset']} {base['arch']} "
            f"d={base['d_hidden']} L={base['num_blocks']}, {base['epochs']} epochs)\n\n{table}\n\n"
            "![checks vs λ](intervention.png)\n")


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
