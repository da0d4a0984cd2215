"""Ladder tables, interpretation helpers, cross-checks and figure — rebuilt from the JSON alone."""

import json
import re
from dataclasses import replace
from pathlib import Path

import matplotlib

from ..io import write_text

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ..config import TrainConfig  # noqa: E402
from ..errors import UsageError  # noqa: E402
from ..experiments.families import budget_text  # noqa: E402
from ..experiments.ladder import aggregate  # noqa: E402
from ..io import save_figure  # noqa: E402
from ..stores import read_record  # noqa: E402
from .card import fmt_ms  # noqa: E402
from .published import NAMES, beside_published_md, published_ladder  # noqa: E402


def ladder_table_md(agg: dict) -> str:
    """Rows k, columns methods, cells ``0.389 ± 0.001 (n=3)``-style test accuracy."""
    methods = list(agg["table"])
    ks = sorted({k for m in methods for k in agg["table"][m]})
    out = ["| k (last blocks trained) | " + " | ".join(methods) + " |", "|---|" + "---|" * len(methods)]
    for k in ks:
        cells = []
        for m in methods:
            c = agg["table"][m].get(k)
            div = f", {c['diverged']} DIVERGED" if c and c.get("diverged") else ""
            cells.append(f"{fmt_ms(c)} (n={c['n']}{div})" if c else "—")
        out.append(f"| {k} | " + " | ".join(cells) + " |")
    sh = agg.get("shallow") or {}
    if sh:
        one = next(iter(sh.values()))
        cells = [f"{fmt_ms(sh[m])} (n={sh[m]['n']})" if m in sh else "—" for m in methods]
        out.append(f"| matched shallow, L={one['num_blocks']} d={one['d_hidden']} (ours) | " + " | ".join(cells) + " |")
    return "\n".join(out)


def helpers_md(agg: dict) -> str:
    """Gain k=0→k=L, monotonicity and best rung per method, computed from the data.

    With the parameter-matched shallow row: also k=L minus the shallow model (pp), the depth-or-capacity
    reading (positive: the deep model beats a shallow one of its parameter count under the same method).
    """
    L = agg["num_blocks"]
    sh = agg.get("shallow") or {}
    extra = [f"k={L} − matched shallow (pp)"] if sh else []
    rows = ["| " + " | ".join(["method", f"gain k=0→k={L} (pp)", "monotone in k", "max rung", *extra]) + " |",
            "|---|---|---|---|" + "---|" * len(extra)]
    for m, h in agg["helpers"].items():
        g = "—" if h["gain_pp_k0_to_kL"] is None else f"{h['gain_pp_k0_to_kL']:+.1f}"
        full, shallow = (agg["table"][m].get(L) or {}).get("mean"), (sh.get(m) or {}).get("mean")
        d = ([f"{100 * (full - shallow):+.1f}" if full is not None and shallow is not None else "—"] if sh else [])
        if h["max_rung"] is None:  # no rung has a finished run (every one diverged): nothing to read
            rows.append("| " + " | ".join([m, "—", "— (every run diverged)", "—", *d]) + " |")
            continue
        mono = {True: "yes", False: "no"}.get(h["monotone"], "— (one rung)")
        rows.append("| " + " | ".join([m, g, mono, f"k={h['max_rung']}", *d]) + " |")
    return "\n".join(rows)


def devices_md(doc: dict) -> str:
    """Which runs trained where (device and torch, from each record's provenance), by method and rung.

    One ladder file may hold runs of several kinds of device (its identity leaves the device out); a CPU and
    a GPU draw different data orders and crops from one seed, so the reader should know which cell is which.
    """
    where: dict[str, dict[str, list[str]]] = {}
    for key, rec in sorted(doc["runs"].items()):
        prov = rec.get("provenance") or {}
        place = f"{prov.get('device') or (rec.get('config') or {}).get('device', '?')}, torch {prov.get('torch', '?')}"
        m, k, s = key.split("/")
        where.setdefault(place, {}).setdefault(m, []).append(f"{k}/{s}")
    if len(where) == 1:
        (place, by), = where.items()
        return f"Every run ({sum(map(len, by.values()))}) trained on {place}."
    kinds = {re.sub(r" \(\d+ threads?, ", " (", p) for p in where}  # a thread count is not another kind of device
    lines = (["The runs trained on one kind of device with different thread counts (the same numbers):", ""]
             if len(kinds) == 1 else  # (walk 29 case 130: 1- and 2-thread CPU runs read as two kinds)
             ["The runs trained on more than one kind of device. A CPU and a GPU draw different data orders and "
              "crops from one seed, so two devices' runs of one seed are two samples:", ""])
    for place, by in where.items():
        runs = "; ".join(f"{m} {', '.join(ks)}" for m, ks in sorted(by.items()))
        lines.append(f"- {place} ({sum(map(len, by.values()))} runs): {runs}")
    return "\n".join(lines)


def cross_check_md(doc: dict, audit_dir: Path | None) -> str:
    """k=0 is the audit's frozen-baseline config and k=L its full config; compare with an audit run if given."""
    L = doc["identity"]["num_blocks"]
    lines = [f"k=0 trains with `train_blocks=none` — the audit's frozen-blocks baseline config — and k={L} with "
             "`train_blocks=all` — the audit's full config; same recipe, model, data and seed, so a stored audit "
             "run of the same configuration on the same kind of device must give the same accuracy (tracking does "
             "not touch training; a CPU and a GPU draw different data orders from the same seed)."]
    if audit_dir is None:
        return "\n".join(lines + ["", "(pass `--audit-dir` to compare with a stored audit.)"])
    # every intact audit record, matched by its training config alone: the audit measures on another schedule and
    # with its monitor (tracking), which does not touch training (the k=L run was missed for that)
    read = [(p, *read_record(p)) for p in sorted((Path(audit_dir) / "runs").glob("*/result.json"))]
    stored = [r for _, r, _ in read if r]
    damaged = [f"`{p.relative_to(audit_dir)}` ({bad})" for p, _, bad in read if bad]  # named, never compared
    rows = ["", "| run | ladder acc | audit acc | equal |", "|---|---|---|---|"]
    for key, rec in sorted(doc["runs"].items()):
        m, k, s = key.split("/")
        if k == "shallow" or int(k[1:]) not in (0, L):
            continue
        cfg = TrainConfig.from_dict(rec["config"])
        found = next((r for r in stored for dev in ("cpu", cfg.device)
                      if replace(cfg, device=dev).same_as(r.get("config") or {})), None)
        a = rec["final"]["test_acc"]
        b = found["final"]["test_acc"] if found else None
        rows.append(f"| {key} | {a:.4f} | {'not in audit' if b is None else f'{b:.4f}'} | "
                    f"{'—' if b is None else ('yes' if a == b else 'NO')} |")
    note = ["", f"{len(damaged)} record(s) of the audit cannot be trusted, so none is compared (a row of theirs "
            "reads \"not in audit\"): " + "; ".join(damaged) + ". Rerun the audit into its folder to train them "
            "again."] if damaged else []  # (walk 29 W4: an edited or linked record was "not in audit", unsaid)
    return "\n".join(lines + rows + note + _other_recipe(doc, audit_dir, rows))


def _other_recipe(doc: dict, audit_dir: Path, rows: list[str]) -> list[str]:
    """A line saying the audit is of another recipe than the ladder, and where they differ.

    (Walk 27 case 53: every row read "not in audit", as if runs were missing.)
    """
    if not any("not in audit" in r for r in rows):
        return []
    try:
        audit = json.loads((Path(audit_dir) / "report.json").read_text(encoding="utf-8"))["config"]["base"]
        a, b = TrainConfig.from_dict(audit).to_dict(), TrainConfig.from_dict(doc["identity"]).to_dict()
    except (OSError, ValueError, KeyError, TypeError, UsageError):
        return []
    skip = {"method", "method_options", "train_blocks", "seed", "device", "data_dir", "download"}
    diff = sorted(k for k in set(a) | set(b) if k not in skip and a.get(k) != b.get(k))
    return ["", f"The audit in `{audit_dir}` is of another recipe (differs in: {', '.join(diff)}): its runs are "
            "not this ladder's, so none is compared."] if diff else []


def ladder_figure(agg: dict, path: Path, title: str, published: dict | None = None) -> None:
    """Accuracy vs k per method (error bars = std over seeds); each method's k=0 level dashed.

    With ``published`` (the published ladder of this protocol), each of its methods is drawn beside ours in the
    same colour: hollow markers on a dash-dot line, error bars its std over its seeds.
    """
    fig, ax = plt.subplots(figsize=(7.0 if published else 5.2, 3.6))
    if all(c["mean"] is None for ks in agg["table"].values() for c in ks.values()):
        ax.set_ylim(0, 1)  # every run diverged: an accuracy axis for the annotations, not matplotlib's ±0.05
    for i, (m, ks) in enumerate(agg["table"].items()):
        k = sorted(ks)
        nan = float("nan")  # a cell whose every run diverged has no mean: a gap in the line, annotated below
        mean = [ks[j]["mean"] if ks[j]["mean"] is not None else nan for j in k]
        std = [ks[j]["std"] or 0 for j in k]
        xs = [j + 0.04 * (i - 1) for j in k]
        line = ax.errorbar(xs, mean, yerr=std, marker="o", capsize=3, label=m)
        if published and m in published:
            pm, ps = zip(*published[m], strict=True)
            ax.errorbar([j + 0.12 for j in range(len(pm))], pm, yerr=ps, marker="o", mfc="none", ls="-.", lw=1,
                        capsize=2, color=line[0].get_color(), label=f"{NAMES[m]}, published")
        if 0 in ks and ks[0]["mean"] is not None:
            ax.axhline(ks[0]["mean"], ls="--", lw=1, color=line[0].get_color())
        sh = (agg.get("shallow") or {}).get(m)
        if sh and sh["mean"] is not None:  # the parameter-matched shallow model: dotted
            ax.axhline(sh["mean"], ls=":", lw=1.2, color=line[0].get_color())
        for x, j in zip(xs, k, strict=True):  # a diverged run is a finding: say so where it would have been
            if ks[j].get("diverged"):
                y = ks[j]["mean"] if ks[j]["mean"] is not None else ax.get_ylim()[0]
                ax.annotate(f"{ks[j]['diverged']} diverged", (x, y), textcoords="offset points", xytext=(4, -10),
                            fontsize=7, color=line[0].get_color())
    dotted = "; dotted: matched shallow" if agg.get("shallow") else ""
    ax.set_xlabel(f"k = number of last blocks trained (error bars: std over seeds; dashed: k = 0{dotted})",
                  fontsize=8)
    ax.set_ylabel("test accuracy")
    ax.set_xticks(range(agg["num_blocks"] + 1))
    ax.set_title(title)
    if published:  # twice the entries: beside the axes, not over the lines
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def ladder_report(path: Path, audit_dir: Path | None = None) -> tuple[str, str]:
    """Write ``<stem>.md`` and ``<stem>.png`` beside a ladder JSON; return (markdown, table)."""
    path = Path(path)
    doc = json.loads(path.read_text(encoding="utf-8"))
    agg = aggregate(doc)
    ident = doc["identity"]
    title = (f"Depth-utility ladder — {ident['dataset']}, {ident['arch']} d={ident['d_hidden']} "
             f"L={ident['num_blocks']}, {budget_text(ident)}")
    table = ladder_table_md(agg)
    fig = path.with_suffix(".png")
    published = published_ladder(ident)
    ladder_figure(agg, fig, title, published)
    n_div = sum(r["status"] == "diverged" for r in doc["runs"].values())
    md = "\n".join([
        f"# {title}", "", f"Test accuracy, mean ± std over seeds (ddof 1), n runs per cell; from `{path.name}`.",
        "", table, "", "## Reading the ladder", "", helpers_md(agg), "",
        f"{n_div} run(s) diverged (kept, status `diverged`)." if n_div else "No run diverged.", "",
        "## Where the runs trained", "", devices_md(doc), "",
        *(["## Beside the published ladder", "",
           "This file's configuration is the published protocol's (CIFAR-10, reference ResMLP, 100 epochs, the "
           "recipe's defaults), so each cell is read beside the study's (seeds 42/123/456, mean ± std; its FA is "
           "`fa-stream`). Δ = ours − published. Figure: published as hollow markers, dash-dot.", "",
           beside_published_md(agg, published), ""] if published else []),
        "## Cross-check with the audit", "", cross_check_md(doc, audit_dir), "", f"![ladder]({fig.name})", ""])
    write_text(path.with_suffix(".md"), md)
    return md, table
