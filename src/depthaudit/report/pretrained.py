"""Cross-model saturation table and figure for pretrained causal LMs (``saturation --family hf``)."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ..io import save_figure  # noqa: E402


def _rows(doc: dict) -> list[dict]:
    """One row per model, smallest first."""
    rows = []
    for key, rec in doc["runs"].items():
        s = rec.get("signal") or {}
        ag = s.get("AG") or []
        rows.append({"model": key, "layers": rec["blocks"], "params": rec["params"], "status": rec.get("status", "ok"),
                     "AG": ag, "V": s.get("V") or [], "AGmax": s.get("AGmax"),
                     "argmax": max(range(len(ag)), key=ag.__getitem__) if ag else None,
                     "per_example_max": max(s.get("AG_per_example_max") or [float("nan")]),
                     "low_signal": s.get("low_signal"), "test_loss": rec["final"].get("test_loss"),
                     "split": s.get("split"), "test": s.get("test")})
    return sorted(rows, key=lambda r: r["params"])


def _num(v, fmt: str) -> str:
    return "–" if v is None or v != v else format(v, fmt)


def pretrained_md(doc: dict) -> str:
    """Markdown: per model its layers, parameters, AGmax and where, max V_l, per-example max, low signal, loss."""
    out = ["| model | layers | params | AGmax | at l | max V_l | max per-example ‖∂ℓ_b/∂h_l‖ | low signal | "
           "separated test (δ + t) | held-out loss |", "|---|---|---|---|---|---|---|---|---|---|"]
    rows = _rows(doc)
    for r in rows:
        flag = "–" if r["low_signal"] is None else "yes" if r["low_signal"] else "no"
        loss = _num(r["test_loss"], ".4f") + (" **diverged**" if r["status"] == "diverged" else "")
        where = r["argmax"] if r["argmax"] is not None else "–"
        out.append(f"| {r['model']} | {r['layers']} | {r['params']:,} | {_num(r['AGmax'], '.3e')} | "
                   f"{where} | {_num(max(r['V'] or [float('nan')]), '.3e')} | "
                   f"{_num(r['per_example_max'], '.3e')} | {flag} | {_test(r['test'])} | {loss} |")
    split = next((r["split"] for r in rows if r["split"]), None)
    if split:
        out.append(f"\nMeasured on {split}: never trained on. l = 0 is the stream entering layer 1, l = L the last "
                   "layer's output (before the final norm).")
    return "\n".join(out)


def _test(t: dict | None) -> str:
    """The separated test's decision with its threshold δ + t."""
    if not t or not t.get("decision"):
        return "–"
    return f"{t['decision']} (δ + t = {t['delta']:.0e} + {t['margin']:.1e})"


def pretrained_figure(doc: dict, path: Path, low_signal: float) -> None:
    """AG_l against relative depth l/L for every model (log scale), the low-signal level dotted."""
    fig, ax = plt.subplots(figsize=(5.4, 3.6))
    for r in _rows(doc):
        if r["AG"]:
            n = len(r["AG"]) - 1
            ax.plot([i / max(n, 1) for i in range(n + 1)], r["AG"], "o-", ms=3,
                    label=f"{r['model'].split('/')[-1]} (L={r['layers']})")
    ax.axhline(low_signal, color="grey", ls=":", lw=1, label=f"low signal {low_signal:g}")
    ax.set_yscale("log")
    ax.set_xlabel("layer boundary l / L (0: embeddings, 1: last layer's output)")
    ax.set_ylabel("AG_l = ‖∂ℓ_mean/∂h_l‖")
    from .saturation import saturation_title

    ax.set_title(saturation_title(doc), fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
