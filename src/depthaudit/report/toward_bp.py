"""Tables and figures of the toward-BP experiments (`depthaudit probes`, ours): credit mix and BP warm start."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ..io import save_figure  # noqa: E402
from .card import fmt_ms  # noqa: E402


def credit_mix_md(res: dict) -> str:
    """Rows α: accuracy, aggregate cosines, per-layer cosine of the credit actually used."""
    L1 = len(res["rows"][0]["per_layer"])
    head = ["α", "test acc", "cos mean/layer", "cos concat", *(f"l={i}" for i in range(L1))]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in res["rows"]:
        out.append("| " + " | ".join([f"{r['alpha']:g}", fmt_ms(r["test_acc"]), fmt_ms(r["cos_mean_per_layer"]),
                                      fmt_ms(r["cos_concat"]), *(fmt_ms(c) for c in r["per_layer"])]) + " |")
    p = res["pearson_cos_acc"]
    out += ["", f"Pearson r(cos mean/layer, test acc) over the α grid: {'—' if p is None else f'{p:+.3f}'}"]
    return "\n".join(out)


def credit_mix_figure(res: dict, path: Path) -> None:
    """Scatter of accuracy vs aggregate cosine, one point per α (labelled)."""
    fig, ax = plt.subplots(figsize=(4.8, 3.6))
    for key, mk, lab in (("cos_mean_per_layer", "o", "mean of per-layer cosines"), ("cos_concat", "s", "concat")):
        xs = [r[key]["mean"] for r in res["rows"]]
        ys = [r["test_acc"]["mean"] for r in res["rows"]]
        ax.scatter(xs, ys, marker=mk, label=lab)
        for r, x, y in zip(res["rows"], xs, ys, strict=True):
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
        out.append(f"| {r['arm']} | {fmt_ms(r['test_acc'])} | {fmt_ms(r['cos_mean_start'])} | "
                   f"{fmt_ms(r['cos_mean_end'])} | {fmt_ms(r['cos_concat_end'])} |")
    return "\n".join(out)
