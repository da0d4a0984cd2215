"""Saturation sweep table and figure: AGmax (and V) vs depth beside the test metric."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ..io import save_figure  # noqa: E402


def saturation_rows(doc: dict) -> list[dict]:
    """One row per depth, sorted by number of blocks."""
    rows = []
    for rec in doc["runs"].values():
        s = rec["signal"]
        rows.append({"blocks": rec["blocks"], "extra": rec["config"]["extra"], "params": rec["params"],
                     "AGmax": s["AGmax"], "Vmax": max(s.get("V") or [float("nan")]), "AG": s["AG"], "V": s.get("V"),
                     "low_signal": s["low_signal"], "test_acc": rec["final"]["test_acc"],
                     "matched_min": min(rec.get("matched", {}).get("delta") or [float("nan")]),
                     "test_loss": rec["final"]["test_loss"]})
    return sorted(rows, key=lambda r: r["blocks"])


def saturation_md(doc: dict) -> str:
    """Markdown table: depth, AGmax, max V, low-signal flag, test loss and accuracy."""
    out = ["| blocks (base + N) | params | AGmax | max V_l | low signal | best matched Δ train loss | test loss "
           "| test acc |", "|---|---|---|---|---|---|---|---|"]
    for r in saturation_rows(doc):
        out.append(f"| {r['blocks']} (N={r['extra']}) | {r['params']:,} | {r['AGmax']:.3e} | {r['Vmax']:.3e} | "
                   f"{'yes' if r['low_signal'] else 'no'} | {r['matched_min']:+.2e} | {r['test_loss']:.4f} | "
                   f"{r['test_acc']:.4f} |")
    return "\n".join(out)


def saturation_title(doc: dict) -> str:
    """The saturation table's title from its file alone (the command and ``report`` write the same one)."""
    ident = doc["identity"]
    if ident.get("family") == "gpt":
        what = f"GPT decoder (d={ident.get('d_hidden')}) on text"
    else:
        what = f"ResNet-CIFAR on {ident.get('data', '?')}"
    return f"Depth saturation: {what}, {ident.get('epochs', '?')} epochs"


def grow_title(doc: dict) -> str:
    """The growth table's title from its file alone."""
    ident = doc["identity"]
    return (f"Growth vs scratch: ResNet-8 + {ident.get('extra', '?')} on {ident.get('dataset', '?')}, "
            f"{ident.get('epochs', '?')} epochs, insertions at epochs {ident.get('insert_at', '?')}")


def saturation_figure(doc: dict, path: Path, low_signal: float) -> None:
    """AGmax and max V vs depth (log), the low-signal band shaded, test accuracy on a second axis."""
    rows = saturation_rows(doc)
    x = [r["blocks"] for r in rows]
    fig, ax = plt.subplots(figsize=(5.4, 3.6))
    ax.plot(x, [r["AGmax"] for r in rows], "o-", label="AGmax")
    ax.plot(x, [r["Vmax"] for r in rows], "s--", label="max V_l")
    vals = [v for r in rows for v in (r["AGmax"], r["Vmax"]) if v == v and v > 0] + [low_signal]
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
    family = doc["identity"].get("family", "resnet")
    ax2.set_ylabel("next-token test accuracy" if family == "gpt" else "test accuracy")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=7)
    ident = doc["identity"]
    what = f"GPT decoder d={ident.get('d_hidden')}" if family == "gpt" else "ResNet-8 + N"
    ax.set_title(f"Depth saturation: {what} on {ident.get('data', '?')}, {ident.get('epochs', '?')} epochs", fontsize=9)
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
            out.append(f"| {arm} | {f['blocks']} | {f['train_loss']:.4f} | {f['test_loss']:.4f} | "
                       f"{f['test_acc']:.4f} |")
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
    ax.set_title(f"Growth vs scratch: ResNet-8 + {ident.get('extra', '?')} on {ident.get('dataset', '?')}, "
                 f"{ident.get('epochs', '?')} epochs", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
