"""Cross-model saturation table and figure for pretrained causal LMs (``saturation --family hf``)."""

from pathlib import Path

import matplotlib

from ..io import write_text

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ..io import save_figure  # noqa: E402
from .titles import saturation_title  # noqa: E402


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
    ax.set_title(saturation_title(doc), fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


SCORES = {"BI": "Block Influence 1 − cos(h_ℓ-1, h_ℓ)", "angular_1": "angular distance ℓ-1→ℓ",
          "AG": "AG at the block's output", "V": "V at the block's output",
          "first_order": "first-order removal −⟨∂ℓ/∂h_ℓ, Δh_ℓ⟩"}


def importance_md(name: str, imp: dict) -> str:
    """Per block: the measured removal loss beside every score; their Spearman ρ; each pruning rule's measured loss."""
    pb = imp["per_block"]
    cols = [k for k in SCORES if pb.get(k) is not None]
    out = [f"**{name}**: held-out loss {imp['base_loss']:.4f} on {imp['windows']} windows; Δloss = loss with the "
           "block(s) skipped − intact loss, measured (mean ± standard error over windows).", "",
           "| block ℓ | measured Δloss (skip ℓ) | " + " | ".join(SCORES[k] for k in cols) + " |",
           "|---|---|" + "---|" * len(cols)]
    for i in range(imp["blocks"]):
        cells = [str(i + 1), f"{pb['delta_loss'][i]:+.4f} ± {pb['delta_loss_se'][i]:.4f}"]
        cells += [format(pb[k][i], "+.3e" if k == "first_order" else ".4g") for k in cols]
        out.append("| " + " | ".join(cells) + " |")
    rho = imp["spearman"]
    cells = ["**Spearman ρ with measured Δloss** [95 % bootstrap]", "1"]
    cells += [f"**{rho[k]['spearman']:+.3f}** [{rho[k]['ci95'][0]:+.2f}, {rho[k]['ci95'][1]:+.2f}]" if k in rho
              else "–" for k in cols]
    out.append("| " + " | ".join(cells) + " |")
    lead = imp.get("best_rank_score")
    if lead:
        b = lead["score"]
        vs = "; ".join(f"{SCORES[k].split(' (')[0]}: {d['difference']:+.3f} [{d['ci95'][0]:+.3f}, "
                       f"{d['ci95'][1]:+.3f}], higher in {100 * d['share_best_higher']:.0f} % of resamples"
                       for k, d in lead["versus"].items() if k in SCORES)
        out.append(f"\nBest rank predictor of the measured removal loss: **{SCORES[b]}**; its lead in ρ over each "
                   f"other score (paired bootstrap, 95 %): {vs}.")
    out += ["", "| blocks removed at once (n) | rule | blocks | measured Δloss |", "|---|---|---|---|"]
    for n, rows in imp["pruning"].items():
        best = min(r["delta_loss"] for r in rows)
        for r in rows:
            mark = " (best)" if r["delta_loss"] == best else ""
            out.append(f"| {n} | {r['rule']} | {_blocks(r['blocks'])} | {r['delta_loss']:+.4f} ± "
                       f"{r['delta_loss_se']:.4f}{mark} |")
    return "\n".join(out)


def _blocks(b: list) -> str:
    if len(b) > 2 and b == list(range(b[0], b[-1] + 1)):
        return f"{b[0]}–{b[-1]}"
    return ", ".join(map(str, b))


def importance_figure(name: str, imp: dict, path: Path) -> None:
    """Per-block curves on one axis, each score min–max scaled to [0, 1]; the measured removal loss in black."""
    pb = imp["per_block"]
    x = list(range(1, imp["blocks"] + 1))
    fig, ax = plt.subplots(figsize=(6.4, 4.8))

    def scaled(v):
        lo, hi = min(v), max(v)
        return [(a - lo) / (hi - lo) if hi > lo else 0.0 for a in v]

    ax.plot(x, scaled(pb["delta_loss"]), "o-", color="k", lw=2, ms=3, label="measured Δloss, block skipped")
    for k, style in zip(SCORES, ["s--", "^:", "d-.", "v--", "x-"], strict=True):
        if pb.get(k) is not None and k in imp["spearman"]:
            rho = imp["spearman"][k]["spearman"]
            ax.plot(x, scaled(pb[k]), style, ms=3, lw=1, label=f"{SCORES[k]} (ρ = {rho:+.2f})")
    rules = imp["pruning"].get(max(imp["pruning"], key=int)) if imp["pruning"] else None
    if rules:
        run = next((r["blocks"] for r in rules if r["rule"] == "angular (Gromov)"), None)
        if run:
            ax.axvspan(run[0] - 0.5, run[-1] + 0.5, color="grey", alpha=0.15, lw=0,
                       label=f"angular rule's {len(run)} blocks")
    ax.set_yscale("symlog", linthresh=0.02, linscale=0.5)  # the small differences between middle blocks stay visible
    ax.set_ylim(-0.002, 1.15)
    ax.set_xlabel("block ℓ")
    ax.set_ylabel("score, min–max scaled per curve (symlog)")
    ax.set_title(f"Depth importance vs measured removal loss: {name} ({imp['windows']} held-out windows)", fontsize=8)
    ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def write_importance(store) -> None:
    """``importance_<text>.md`` (tables of every model) and one figure per model next to the store's JSON."""
    parts = []
    for key, rec in store.doc["runs"].items():
        imp, name = rec.get("importance"), key.rsplit("/", 1)[-1]
        if imp:
            slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
            png = store.path.parent / f"importance_{slug}.png"
            importance_figure(name, imp, png)
            parts.append(f"{importance_md(name, imp)}\n\n![importance]({png.name})")
        if rec.get("grow"):
            parts.append(grow_md(name, rec["grow"]))
    if parts:
        path = store.path.parent / store.path.name.replace("saturation_hf_", "importance_hf_")
        text = "# Depth importance beside AG and V\n\n" + "\n\n".join(parts) + "\n"
        write_text(path.with_suffix(".md"), text)
        print(text)
        print(f"wrote {path.with_suffix('.md')} and its figures")


def grow_md(name: str, g: dict) -> str:
    """The growth arms: where the block went, its V and AG there, held-out loss before/after, gain over no insertion."""
    frozen = "pretrained weights frozen" if not g["model_lr"] else f"pretrained weights at lr {g['model_lr']:g}"
    out = [f"**{name}**, growth: {g['steps']} AdamW steps of {g['batch_size']} windows per arm (same batches), new "
           f"block at lr {g['grow_lr']:g}, {frozen}; held-out loss on {g['held_out_windows']} windows.", "",
           "| arm | boundary l | V_l | AG_l | held-out before | after | decrease | gain over none | "
           "function-preserving at insertion |", "|---|---|---|---|---|---|---|---|---|"]
    for arm, r in g["arms"].items():
        gain = g["gain_over_none"].get(arm)
        kept = "yes (bit-equal loss)" if r["function_preserving"] else "NO"
        out.append(f"| {arm} | {'–' if r['position'] is None else r['position']} | {_num(r['V'], '.3e')} | "
                   f"{_num(r['AG'], '.3e')} | {r['held_out_before']:.5f} | {r['held_out_after']:.5f} | "
                   f"{r['decrease']:+.5f} | {_num(gain, '+.5f')} | {kept} |")
    verdict = "yes" if g["V_predicts_order"] else "no"
    out.append(f"\nDoes the realised decrease rank as V predicts (high-V gains more than low-V)? **{verdict}**."
               + (" V = AG at every boundary here (each batch has fewer positions than the block has features), so "
                  "the ranking is AG's." if g.get("V_equals_AG") else ""))
    return "\n".join(out)
