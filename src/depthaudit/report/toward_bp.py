"""Tables and figures of the toward-BP experiments (`depthaudit probes`, ours): credit mix and BP warm start."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ..io import save_figure  # noqa: E402
from .card import fmt_ms  # noqa: E402


def _acc(row: dict) -> str:
    """The row's accuracy over the runs that did not diverge, and how many did (a status, never a number)."""
    k = row.get("diverged") or 0
    return fmt_ms(row["test_acc"]) + (f" ({k} diverged)" if k else "")


def credit_mix_md(res: dict) -> str:
    """Rows α: accuracy, aggregate cosines, per-layer cosine of the credit actually used."""
    L1 = max(len(r["per_layer"]) for r in res["rows"])
    head = ["α", "test acc", "cos mean/layer", "cos concat", *(f"l={i}" for i in range(L1))]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in res["rows"]:
        per_layer = [*(fmt_ms(c) for c in r["per_layer"]), *(["—"] * (L1 - len(r["per_layer"])))]
        out.append("| " + " | ".join([f"{r['alpha']:g}", _acc(r), fmt_ms(r["cos_mean_per_layer"]),
                                      fmt_ms(r["cos_concat"]), *per_layer]) + " |")
    p = res["pearson_cos_acc"]
    n = sum(r["cos_mean_per_layer"].get("mean") is not None and r["test_acc"].get("mean") is not None
            for r in res["rows"])
    why = "" if p is not None else (f" (needs at least 3 α values with both numbers; this grid has {n})" if n < 3
                                    else " (undefined: one side is constant over the grid)")
    out += ["", f"Pearson r(cos mean/layer, test acc) over the α grid: {'—' if p is None else f'{p:+.3f}'}{why}"]
    return "\n".join(out)


def credit_mix_figure(res: dict, path: Path) -> None:
    """Scatter of accuracy vs aggregate cosine, one point per α (labelled)."""
    fig, ax = plt.subplots(figsize=(4.8, 3.6))
    for key, mk, lab in (("cos_mean_per_layer", "o", "mean of per-layer cosines"), ("cos_concat", "s", "concat")):
        pts = [(r, r[key]["mean"], r["test_acc"]["mean"]) for r in res["rows"]
               if r[key]["mean"] is not None and r["test_acc"]["mean"] is not None]  # (every run diverged: no point)
        rows_, xs, ys = (list(t) for t in zip(*pts, strict=True)) if pts else ([], [], [])
        ax.scatter(xs, ys, marker=mk, label=lab)
        for r, x, y in zip(rows_, xs, ys, strict=True):
            if x is not None and key == "cos_mean_per_layer":
                ax.annotate(f"α={r['alpha']:g}", (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("aggregate cosine with BP")
    ax.set_ylabel("test accuracy")
    ax.set_title(f"Credit mix (ours): {res['method']} → BP")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def warm_start_md(res: dict) -> str:
    """Arms: method from the BP state, method from scratch, BP continued."""
    out = ["| arm | test acc | cos mean/layer at start | at end | cos concat at end |", "|---|---|---|---|---|"]
    for r in res["rows"]:
        out.append(f"| {r['arm']} | {_acc(r)} | {fmt_ms(r['cos_mean_start'])} | "
                   f"{fmt_ms(r['cos_mean_end'])} | {fmt_ms(r['cos_concat_end'])} |")
    return "\n".join(out)
