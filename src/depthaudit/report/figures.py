"""Audit figures (matplotlib, Agg): cosine heatmaps, scale checks over training, depth utility bars."""

from pathlib import Path

import matplotlib

from ..diagnostics.base import registered

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ..io import save_figure  # noqa: E402


def _nan(v):
    return np.nan if v is None else v


def what(report: dict) -> str:
    """``cifar10, resmlp d=256 L=4, 100 epochs``: what the figures show, for their titles."""
    b = (report.get("config") or {}).get("base") or {}
    stop = f" (first {b['stop_after']})" if b.get("stop_after") else ""
    return (f"{b.get('dataset', '?')}, {b.get('arch', '?')} d={b.get('d_hidden', '?')} L={b.get('num_blocks', '?')}, "
            f"{b.get('epochs', '?')} epochs{stop}")


def cosine_heatmaps(report: dict, path: Path) -> None:
    """Per-layer credit cosine (rows l = 0..L) over training epochs (columns), one panel per method."""
    ms = report["methods"]
    fig, axes = plt.subplots(1, len(ms), figsize=(3.4 * len(ms) + 1, 3.2), squeeze=False, layout="constrained")
    cmap = plt.get_cmap("RdBu_r").with_extremes(bad="0.25")  # a missing/non-finite cosine is dark grey, never 0
    for ax, m in zip(axes[0], ms, strict=True):
        h = m["history"]
        grid = np.array([[_nan(v) for v in row] for row in h["per_layer_cosine"]], dtype=float).T  # (L+1, T)
        if not grid.size:  # no seed finished (every one diverged): nothing to draw, and the panel says so
            ax.text(0.5, 0.5, "no finished run\n(diverged)", ha="center", va="center", transform=ax.transAxes)
            ax.set_title(m["method"])
            ax.set_xticks([])
            ax.set_yticks([])
            continue
        ax.imshow(np.ma.masked_invalid(grid), aspect="auto", origin="lower", cmap=cmap, vmin=-1, vmax=1,
                       extent=(-0.5, len(h["epochs"]) - 0.5, -0.5, grid.shape[0] - 0.5) if grid.size else None)
        ax.set_title(m["method"])
        ax.set_xlabel("epoch")
        ticks = range(len(h["epochs"]))
        step = max(1, len(h["epochs"]) // 6)
        ax.set_xticks(list(ticks)[::step], [str(e) for e in h["epochs"]][::step])
        ax.set_yticks(range(grid.shape[0]))  # one row per stream position l = 0..L: integer ticks
    axes[0][0].set_ylabel("stream position l")
    scale = plt.cm.ScalarMappable(norm=plt.Normalize(-1, 1), cmap=cmap)
    fig.colorbar(scale, ax=axes[0].tolist(), label="Γ_l (standard cosine)")
    fig.suptitle(f"Per-layer credit cosine Γ_l over training — {what(report)}\n"
                 "(standard convention, seed mean; grey = no value)", fontsize=9)
    save_figure(fig, path)
    plt.close(fig)


def scale_checks(report: dict, path: Path) -> None:
    """ρ (D1) and ‖g_L‖ (D2) over training on log axes, thresholds dashed."""
    th = report["thresholds"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.4))
    for m in report["methods"]:
        h = m["history"]
        l1, = a1.plot(h["epochs"], [_nan(v) for v in h["rho"]], marker=".", label=m["method"])
        l2, = a2.plot(h["epochs"], [_nan(v) for v in h["g_L"]], marker=".", label=m["method"])
        for ax, line, name in ((a1, l1, "D1"), (a2, l2, "D2")):  # the monitor's first firing (seed mean curve)
            fired = [e for e in ((m.get("monitor") or {}).get(name) or {}).get("first_fired_epoch") or []
                     if e is not None]
            if fired:
                ax.axvline(min(fired), color=line.get_color(), ls=":", lw=1.2)
    a1.axhline(th["rho_max"], ls="--", c="k", lw=1, label=f"D1 flag > {th['rho_max']:g}")
    a2.axhline(th["ref_factor"] * th["eps"], ls="--", c="k", lw=1,
               label=f"D2 flag < {th['ref_factor'] * th['eps']:.0e}")
    bp = report["config"].get("probe_batch_size", "?")
    stat = report["config"].get("d1_stat", "median")  # the statistic this audit's D1 used
    for ax, t in ((a1, f"D1: ρ = max ‖h_l‖/‖h_(l-1)‖ ({stat} norms)"),
                  (a2, f"D2: ‖g_L‖ (mean-loss ref., batch {bp}, median)")):
        ax.set_yscale("log")
        ax.set_xlabel("epoch")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_title(t)
        ax.legend(fontsize=8)
    fig.text(0.01, 0.01, "dotted: epoch a check first fired (training monitor)", fontsize=7)
    fig.suptitle(what(report), fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def depth_utility(report: dict, path: Path) -> None:
    """Test accuracy trained vs frozen-blocks baseline per method (error bars = std over seeds)."""
    ms = report["methods"]
    x = np.arange(len(ms))
    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(ms), 3.4))
    bars = ((-0.18, "trained_test_acc", "trained (all blocks)"), (0.18, "frozen_test_acc", "frozen blocks"))
    for off, key, lab in bars:
        vals = [_nan(m[key]["mean"]) for m in ms]
        err = [m[key]["std"] or 0 for m in ms] if any(m[key]["std"] for m in ms) else None
        ax.bar(x + off, vals, 0.36, yerr=err, capsize=3, label=lab)
    th = report["thresholds"]["gap_min_pp"]
    for i, m in enumerate(ms):  # the D3 verdict over each pair: gap in pp, PASS/FLAG against the threshold
        c = m["checks"]["D3"]
        top = np.nanmax([_nan(m["trained_test_acc"]["mean"]), _nan(m["frozen_test_acc"]["mean"]), 0.0])
        if c["status"] == "NOT MEASURED":  # a monitor's report without a frozen twin: no gap, nothing diverged
            txt = f"D3 not measured\n({c.get('why') or 'no frozen twin'})"
        else:
            txt = "diverged" if c["value"] is None else f"{c['value']:+.1f} pp\n{c['status']}"
            dv = m.get("diverged") or {}  # seeds left out of the bars: said on them, as the card says (walk 34
            if c["value"] is not None and dv.get("excluded_seeds"):  # case 147)
                txt += f"\n{dv['excluded_seeds']} of {dv.get('n_seeds', '?')} seeds\ndiverged, excluded"
        ax.annotate(txt, (i, top), textcoords="offset points", xytext=(0, 4), ha="center", fontsize=7,
                    color="C3" if c["status"] == "FLAG" else "0.2")
    ax.set_xticks(x, [m["method"] for m in ms])
    ax.set_ylabel("test accuracy")
    ax.margins(y=0.2)
    err_note = "; error bars: std over seeds" if any(m["trained_test_acc"]["std"] for m in ms) else ""
    ax.set_title(f"D3: depth utility (FLAG when trained − frozen < {th:g} pp){err_note}\n{what(report)}", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def audit_figures(report: dict, out: Path) -> dict[str, str]:
    """Write all audit figures into ``out``; return ``{name: relative path}``."""
    figs = {"cosine_heatmap": "cosine_heatmap.png", "scale_checks": "scale_checks.png",
            "depth_utility": "depth_utility.png"}
    cosine_heatmaps(report, out / figs["cosine_heatmap"])
    scale_checks(report, out / figs["scale_checks"])
    depth_utility(report, out / figs["depth_utility"])

    for d in registered():  # each quantity's own figures (diagnostics/*.py)
        for name, file in d.figures(report, out).items():
            _own_figure(d, name, file, out, figs)
            figs[name] = file
    return figs


def _own_figure(d, name: str, file, out: Path, figs: dict) -> None:
    """Refuse a figure a diagnostic names that is not a new file of its own in the folder.

    (Walk 31 W6: a plug-in's ``../x.png`` linked outside it; its ``report.md`` recorded the report as a figure.)
    """
    from ..errors import UsageError
    from ..plugins import defined_at

    ok = isinstance(file, str) and file and file == Path(file).name and file not in (".", "..") \
        and file not in ("report.json", "report.md") and file not in figs.values() and (Path(out) / file).is_file()
    if not ok:
        raise UsageError(f"diagnostic {type(d).__name__ if not isinstance(d, type) else d.__name__} "
                         f"({defined_at(d if isinstance(d, type) else type(d))}): figures() named {file!r} for "
                         f"{name!r}, not a file it wrote into the audit folder under a name of its own; write each "
                         "figure into out under a new plain file name (no folder, not report.md or another figure's) "
                         "and return that name")
