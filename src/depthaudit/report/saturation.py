"""Saturation sweep table and figure: AGmax (and V) vs depth beside the test metric."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ..experiments.families import budget_text, family_of  # noqa: E402
from ..io import save_figure  # noqa: E402
from .pretrained import pretrained_figure, pretrained_md  # noqa: E402
from .titles import saturation_title  # noqa: E402,F401  (re-exported: the commands and the API take it from here)


def saturation_rows(doc: dict) -> list[dict]:
    """One row per depth, sorted by number of blocks; a diverged run has ``status`` and NaN measurements."""
    nan = float("nan")
    rows = []
    for rec in doc["runs"].values():
        s = rec.get("signal") or {}
        c = s.get("credit") or {}
        rows.append({"blocks": rec["blocks"], "extra": rec["config"]["extra"], "params": rec["params"],
                     "status": rec.get("status", "ok"), "AGmax": s.get("AGmax", nan),
                     "Vmax": max(s.get("V") or [nan]), "AG": s.get("AG"), "V": s.get("V"),
                     "low_signal": s.get("low_signal"), "test_acc": rec["final"]["test_acc"],
                     "AGmax_credit": c.get("AGmax"), "Vmax_credit": max(c.get("V") or [nan]) if c else None,
                     "method": c.get("method"), "low_signal_credit": c.get("low_signal"),
                     "matched_min": min((rec.get("matched") or {}).get("delta") or [nan]),
                     "test": s.get("test"), "split": s.get("split"),
                     "test_loss": rec["final"]["test_loss"]})
    return sorted(rows, key=lambda r: r["blocks"])


def _num(v, fmt: str) -> str:
    return "–" if v is None or v != v else format(v, fmt)


def saturation_md(doc: dict) -> str:
    """The saturation table of a stored sweep: one row per depth (:func:`depth_table`), or per model (pretrained)."""
    return pretrained_md(doc) if family_of(doc["identity"]).pretrained else depth_table(doc)


def depth_table(doc: dict) -> str:
    """Markdown table: depth, AGmax, max V, low-signal flag (also from the method's credit), test loss and accuracy."""
    rows = saturation_rows(doc)
    credit = any(r["AGmax_credit"] is not None for r in rows)
    method = next((r["method"] for r in rows if r["method"]), "method")
    tested = any(r["test"] for r in rows)
    head = ("| blocks (base + N) | params | AGmax | max V_l | low signal | "
            + ("separated test (AGmax vs δ + t) | " if tested else "")
            + ""
            + (f"AGmax from {method}'s credit | max V_l ({method}) | low signal ({method}) | " if credit else "")
            + "best matched Δ train loss | test loss | test acc |")
    out = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for r in rows:
        flag = "–" if r["low_signal"] is None else "yes" if r["low_signal"] else "no"
        cells = [f"{r['blocks']} (N={r['extra']})", f"{r['params']:,}", _num(r["AGmax"], ".3e"), _num(r["Vmax"], ".3e"),
                 flag]
        if tested:
            t = r["test"] or {}
            cells.append("–" if not t.get("decision") else
                         f"{t['decision']} ({_num(t['statistic'], '.2e')} vs {t['delta']:.0e} + {t['margin']:.1e})")
        if credit:
            cflag = "–" if r["low_signal_credit"] is None else "yes" if r["low_signal_credit"] else "no"
            cells += [_num(r["AGmax_credit"], ".3e"), _num(r["Vmax_credit"], ".3e"), cflag]
        acc = _num(r["test_acc"], ".4f") + (" **diverged**" if r["status"] == "diverged" else "")
        cells += [_num(r["matched_min"], "+.2e"), _num(r["test_loss"], ".4f"), acc]
        out.append("| " + " | ".join(cells) + " |")
    same = [r for r in rows if r["V"] and r["AG"]
            and all(abs(v - a) <= 1e-9 * a for v, a in zip(r["V"], r["AG"], strict=False))]
    if rows and len(same) == len(rows):
        out.append("\nV = AG at every depth: each analysis batch has no more positions than the candidate block has "
                   "features, so the features span the batch and V adds nothing to AG here (a larger --batch-size, "
                   "or a family with spatial/token positions, makes V informative).")
    if tested:
        t = next(r["test"] for r in rows if r["test"])
        split = {"test": "held-out (test split) batches, never trained on", "train": "training batches"}.get(
            next((r["split"] for r in rows if r["split"]), "train"), "?")
        out.append(f"\nAG measured on {split}. Separated test per depth: H0 Γ ≤ δ (saturated) against H1 Γ ≥ δ + 2t, "
                   f"decided at AGmax > δ + t; δ = {t['delta']:g}, t: {t['margin_rule']}, n = {t['n_examples']} "
                   "examples per depth.")
    if any(r["status"] == "diverged" for r in rows):
        out.append("\nA **diverged** run (non-finite loss) is recorded but not measured: no AG, V or insertion.")
    return "\n".join(out)


def grow_title(doc: dict) -> str:
    """The growth table's title from its file alone."""
    ident = doc["identity"]
    return (f"Growth vs scratch: {_grow_what(ident)} on {ident.get('dataset', '?')}, "
            f"{budget_text(ident)}, insertions at the start of epochs {ident.get('insert_at', '?')}")


def _grow_what(ident: dict) -> str:
    return family_of(ident).grow_what(ident)


def saturation_figure(doc: dict, path: Path, low_signal: float) -> None:
    """The saturation figure of a stored sweep: against depth (:func:`depth_figure`), or per model (pretrained)."""
    (pretrained_figure if family_of(doc["identity"]).pretrained else depth_figure)(doc, path, low_signal)


def depth_figure(doc: dict, path: Path, low_signal: float) -> None:
    """AGmax and max V vs depth (log), the low-signal band shaded, test accuracy on a second axis."""
    family = family_of(doc["identity"])
    rows = saturation_rows(doc)
    x = [r["blocks"] for r in rows]
    fig, ax = plt.subplots(figsize=(5.4, 3.6))
    ax.plot(x, [r["AGmax"] for r in rows], "o-", label="AGmax")
    ax.plot(x, [r["Vmax"] for r in rows], "s--", label="max V_l")
    if any(r["AGmax_credit"] is not None for r in rows):  # the same measures from the method's own credit
        method = next((r["method"] for r in rows if r["method"]), "the method")  # (a store written before the
        # spec was recorded holds "" for a plug-in class without `name`: walk 36 W2)
        ax.plot(x, [r["AGmax_credit"] if r["AGmax_credit"] is not None else float("nan") for r in rows], "o-",
                mfc="none", color="C2", label=f"AGmax from {method}'s credit")
    for r in rows:
        if r["status"] == "diverged":
            ax.axvline(r["blocks"], color="C3", ls=":", lw=1)
    if any(r["status"] == "diverged" for r in rows):
        ax.plot([], [], color="C3", ls=":", label="diverged (not measured)")
    vals = [v for r in rows for v in (r["AGmax"], r["Vmax"], r["AGmax_credit"]) if v is not None and v == v and v > 0]
    vals += [low_signal]
    lo = min(vals) / 10
    # the AGmax flag's band, drawn over the curves (translucent) and down to the axis
    ax.axhspan(lo, low_signal, color="grey", alpha=0.25, zorder=3, lw=0, label=f"low signal: AGmax < {low_signal:g}")
    ax.set_yscale("log")
    ax.set_ylim(bottom=lo)
    ax.set_xlabel("residual blocks")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel("activation-gradient signal")
    ax2 = ax.twinx()
    ax2.plot(x, [r["test_acc"] for r in rows], "^:", color="k", label="test acc")
    ax2.set_ylabel(family.accuracy_label)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=7)
    ident = doc["identity"]
    what = family.figure_what(ident)
    ax.set_title(f"Depth saturation: {what} on {ident.get('data', '?')}, {budget_text(ident)}", fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def grow_md(doc: dict) -> str:
    """Grown vs scratch: final train loss, test loss, test accuracy, blocks."""
    out = ["| arm | blocks | final train loss | test loss | test acc |", "|---|---|---|---|---|"]
    for arm in ("grown", "scratch"):
        rec = doc["runs"].get(arm)
        if rec:
            f = rec["final"]
            acc = _num(f["test_acc"], ".4f") + (" **diverged**" if rec.get("status") == "diverged" else "")
            out.append(f"| {arm} | {f['blocks']} | {_num(f['train_loss'], '.4f')} | {_num(f['test_loss'], '.4f')} | "
                       f"{acc} |")
        else:  # an interrupted command's file: the comparison's missing side is said, not left out (walk 24 case 96)
            out.append(f"| {arm} | — | not trained yet: rerun the grow command to train it | — | — |")
    return "\n".join(out)


def grow_figure(doc: dict, path: Path) -> None:
    """Test accuracy per epoch for both arms; insertion epochs marked."""
    fig, ax = plt.subplots(figsize=(5.2, 3.4))
    for arm, rec in doc["runs"].items():
        h = rec["history"]
        ax.plot([e["epoch"] for e in h], [e["test_acc"] for e in h], "o-", label=arm)
    for e in doc["identity"].get("insert_at", []):
        ax.axvline(e - 0.5, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("epoch (dotted: insertion before that epoch)")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel("test accuracy")
    ident = doc["identity"]
    ax.set_title(f"Growth vs scratch: {_grow_what(ident)} on {ident.get('dataset', '?')}, "
                 f"{budget_text(ident)}", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
