"""The audit report card: the standard pair beside the protocol's verdicts, per-layer detail, identity.

The per-layer and functional sections are the diagnostics' own (:meth:`Diagnostic.section`, in registry order).
"""

import json
from pathlib import Path

from ..diagnostics import DIAGNOSTICS, INIT_MEASUREMENT_KEY, MEASUREMENT_KEY, registered
from ..experiments.families import budget_text
from ..methods import METHODS
from ..methods.options import declared
from ..models import has_variants
from ..verdicts import check_cells, fmt_ms
from .published_audit import table1_md  # (a module of published figures; card.py imports it only here)

__all__ = ["audit_markdown", "audit_terminal", "fmt_ms"]




def _check(c: dict, fmt: str) -> str:
    v, m = check_cells(c, fmt)  # enough digits that neither contradicts the status
    return f"{v} {c['status']} ({m})"


def _rows(report: dict) -> list[list[str]]:
    rows = []
    for m in report["methods"]:
        sp, ck = m["standard_pair"], m["checks"]
        rob = (m.get("robust_cosine") or {}).get("concat")
        dv = m.get("diverged") or {}
        if dv.get("excluded_seeds") and dv["excluded_seeds"] == dv.get("n_seeds"):  # nothing left to measure
            rows.append([m["method"], *["diverged"] * 6, f"DIVERGED ({dv['excluded_seeds']} of {dv['n_seeds']} seeds)"])
            continue
        verdict = "FLAG " + ",".join(m["flags"]) if m["flags"] else "PASS"
        if ck["D3"]["status"] == "NOT MEASURED":  # a monitor's card without a frozen twin: D1 and D2 only
            verdict += f" (D3 not measured{': ' + ck['D3']['why'] if ck['D3'].get('why') else ''})"
        if dv.get("excluded_seeds"):
            verdict += f"; {dv['excluded_seeds']} of {dv['n_seeds']} seeds DIVERGED, excluded"
        rows.append([m["method"], fmt_ms(sp["test_acc"]), fmt_ms(sp["aggregate_cosine_mean_per_layer"]),
                     fmt_ms(rob), _check(ck["D1"], ".3g"), _check(ck["D2"], ".2e"),
                     _check(ck["D3"], "+.1f"), verdict])
    return rows


def _excluded(m: dict) -> str:
    """A depth-utility row's note: how many seeds diverged and were left out of its means."""
    d = m.get("diverged") or {}
    return f"{d['excluded_seeds']} of {d['n_seeds']} seeds, excluded" if d.get("excluded_seeds") else "none"


def _decision_rows(report: dict) -> list[list[str]]:
    return [[r["method"], ("yes: " + ", ".join(r["standard_pair_why"])) if r["standard_pair_walks_back"] else "no",
             ("yes: " + ", ".join(r["protocol_flags"])) if r["protocol_walks_back"] else "no"]
            for r in report["decision"]["rows"]]


def _stopped_note(report: dict) -> str:
    """A stopped run's accuracy is the stopping epoch's; say so where D3 uses it."""
    stopped = [m["method"] for m in report["methods"]
               if any(x is not None for x in (m.get("monitor") or {}).get("stopped_at_epoch") or [])]
    if not stopped:
        return ""
    return (f"\n\nStopped early: {', '.join(stopped)}. Their accuracy (and D3) is at the stopping epoch, against a "
            "frozen baseline trained for the whole budget.")


def _fired(e: list) -> str:
    """``epoch 4`` / ``epochs 4, 6, never`` over seeds."""
    if all(x is None for x in e):
        return "never"
    return ", ".join("never" if x is None else str(x) for x in e)


def _monitor_rows(report: dict) -> list[list[str]]:
    rows = []
    budget = report["config"]["base"]["epochs"]
    for m in report["methods"]:
        mon = m.get("monitor") or {}
        row = [m["method"]]
        for name in ("D1", "D2"):
            c = mon.get(name) or {}
            e = c.get("first_fired_epoch") or []
            if not c.get("tracked", True):
                row.append("not tracked")
                continue
            div = (m.get("diverged") or {}).get("trained", 0)
            saved = [s for s in c.get("compute_saved") or [] if s is not None]
            if div:  # the check fired on a run that then diverged: the firing is the warning, no compute "saved"
                row.append(_fired(e) + f" ({div} of {len(e)} runs then diverged)")
                continue
            row.append(_fired(e) + (f" (stop there: {100 * sum(saved) / len(saved):.0f}% of {budget} epochs saved)"
                                    if saved else ""))
        stopped = [x for x in mon.get("stopped_at_epoch") or [] if x is not None]
        row.append(", ".join(map(str, stopped)) if stopped else "—")
        rows.append(row)
    return rows


def _headers(report: dict) -> list[str]:
    th = report["thresholds"]
    stat = report["config"].get("d1_stat", "median")  # (a mean-based ρ is told apart where it is read)
    stat = "" if stat == "median" else f"{stat}, "
    return ["method", "test acc", "cos Γ (standard)", "robust cos concat (ours)",
            f"D1 ρ ({stat}flag >{th['rho_max']:g})",
            f"D2 ‖g_L‖ (flag <{th['ref_factor'] * th['eps']:.0e})", f"D3 gap pp (flag <{th['gap_min_pp']:g})",
            "verdict"]


def _table_text(headers, rows) -> str:
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True))  # noqa: E731
    return "\n".join([line(headers), "  ".join("-" * w for w in widths), *(line(r) for r in rows)])


def _cell(c) -> str:
    """A Markdown table cell: a '|' escaped and a line break a space, so a row keeps its columns (walk 34 W7)."""
    return " ".join(str(c).replace("|", "\\|").splitlines())


def _table_md(headers, rows) -> str:
    out = ["| " + " | ".join(map(_cell, headers)) + " |", "|" + "---|" * len(headers)]
    return "\n".join(out + ["| " + " | ".join(map(_cell, r)) + " |" for r in rows])


def _title(report: dict) -> str:
    c = report["config"]
    b = c["base"]
    ep = budget_text(b)
    probe = (f"probe {c['probe_batches']}×{c['probe_batch_size']}" if "probe_batches" in c
             else f"probe batch {c.get('probe_size')}")
    fam = [_row_options(r["method"]) for r in report.get("methods") or []]  # each row's own, never the base's
    variant = f" ({b.get('variant', 'v0.1')})" if has_variants(b["arch"]) else ""  # (a user's model has none:
    # "ref" is the published protocol's model, walk 27 case 129)
    d1 = f"; D1 statistic {c['d1_stat']}" if c.get("d1_stat", "median") != "median" else ""  # (walk 27 case 153)
    return (f"depthaudit audit — {b['dataset']} (augment {b.get('augment', 'none')}), {b['arch']}{variant} "
            f"d={b['d_hidden']} L={b['num_blocks']}, {ep}, seeds {c['seeds']}, {probe}{d1}"
            + "".join(f"; {f}" for f in fam if f))


def _row_options(label: str) -> str | None:
    """The options a row ran with that its label does not spell (those at their defaults): ``fa: head feedback``.

    Read from the row's own label (``fa:head=exact`` states its head; ``fa-stream`` runs without the identity),
    never from the base config; None for a method without options or one not registered here.
    """
    name, _, given = label.partition(":")
    if name not in METHODS:
        return None
    stated = {part.partition("=")[0].strip() for part in given.split(",") if part.strip()}
    fmt = lambda v: ("yes" if v else "no") if isinstance(v, bool) else f"{v:g}" if isinstance(v, float) else v  # noqa: E731
    rest = [f"{k} {fmt(o.default)}" for k, o in declared(METHODS.get(name)).items() if k not in stated]
    return f"{label}: {', '.join(rest)}" if rest else None


def _sections(report: dict, table) -> list[tuple[str, str]]:
    ident = report["identity"]["summary"]
    id_rows = [[f"block {i + 1}: ‖f_l(h_(l-1))‖/‖h_(l-1)‖", fmt_ms(v)] for i, v in enumerate(ident["block_ratio"])]
    id_rows += [["stack: ‖h_L − h_0‖/‖h_0‖", fmt_ms(ident["stack_rel_change"])],
                ["stack: cos(h_L, h_0)", fmt_ms(ident["stack_cos"])]]
    if "g_L_median" in ident:
        id_rows.append(["D2 ‖g_L‖ at init (mean loss, median per example)", fmt_ms(ident["g_L_median"], ".2e")])
    excl = any((m.get("diverged") or {}).get("excluded_seeds") for m in report["methods"])
    return [
        ("Standard pair vs protocol (value STATUS (margin))", table(_headers(report), _rows(report))),
        *([("Decision table: " + report["decision"]["summary"],
             table(["method", "standard pair walks back?", "protocol walks back?"], _decision_rows(report)))]
          if report.get("decision") else []),
        *[sec for d in registered() if (sec := _section(d, report, table)) is not None],  # each quantity's own
        ("Training monitor: first epoch each check fired (per seed)",
         table(["method", "D1 fired at", "D2 fired at", "stopped at (--stop-on-flag)"], _monitor_rows(report))
         + _stopped_note(report)),
        ("Depth utility: test accuracy trained vs frozen-blocks baseline"
         + (" vs parameter-matched shallow model (ours)" if _shallow(report) else ""),
         table(["method", "trained", "frozen", "gap pp", *_shallow_head(report)] + (["diverged"] if excl else []),
               [[m["method"], fmt_ms(m["trained_test_acc"]), fmt_ms(m["frozen_test_acc"]),
                 _gap_ms(m["checks"]["D3"]),
                 *_shallow_cells(m)] + ([_excluded(m)] if excl else []) for m in report["methods"]])
         + _shallow_note(report)),
        ("Frozen-init identity check (at initialisation, probe batch, over seeds)",
         table(["quantity", "mean ± std"], id_rows)),
    ]


def _gap_ms(c: dict) -> str:
    """The D3 gap as mean ± std, the mean with the digits its verdict needs (:func:`check_cells`)."""
    if c["value"] is None:
        return "—"
    v = check_cells(c, "+.1f")[0]
    return v if c.get("std") is None else f"{v} ± {c['std']:.{max(1, len(v.partition('.')[2]))}f}"


def _shallow(report: dict) -> dict | None:
    return next((m["shallow"] for m in report["methods"] if m.get("shallow")), None)


def _shallow_head(report: dict) -> list[str]:
    sh = _shallow(report)
    return [f"shallow L={sh['num_blocks']} d={sh['d_hidden']}", "trained − shallow pp"] if sh else []


def _shallow_cells(m: dict) -> list[str]:
    sh = m.get("shallow")
    if not sh:
        return []
    gap = f"{sh['gap_pp']:+.1f}" if sh.get("gap_pp") is not None else "—"
    return [fmt_ms(sh["test_acc"]) + (f" ({sh['diverged']} diverged)" if sh.get("diverged") else ""), gap]


def _shallow_note(report: dict) -> str:
    sh = _shallow(report)
    if not sh:
        return ""
    return (f"\n\nShallow baseline (ours): {sh['num_blocks']} block(s) of width {sh['d_hidden']}, {sh['params']:,} "
            f"parameters vs the full model's {sh['full_params']:,} ({sh['match_pct']:+.2f} %), same method, recipe "
            "and seed, every block trained. A full model that beats its frozen baseline but not this one gains "
            "from capacity, not depth."
            + (" The match is over 2 %: no integer width comes closer for a model this small." if
               abs(sh["match_pct"]) > 2 else ""))


def audit_terminal(report: dict) -> str:
    """Plain-text report card for the terminal."""
    parts = [_title(report), ""]
    for title, body in _sections(report, _table_text):
        parts += [title, body, ""]
    parts.append("Margins: decades for D1/D2, pp for D3; positive = passing side. Γ and D2 are in the field's "
                 "convention; the robust and update cosines are ours.")
    return "\n".join(parts)


def audit_markdown(report: dict, figures: dict[str, str]) -> str:
    """``report.md``: the card as Markdown tables, the figures, definitions and provenance."""
    prov = report["provenance"]
    parts = [f"# {_title(report)}", ""]
    for title, body in _sections(report, _table_md):
        parts += [f"## {title}", "", body, ""]
    parts += ["Margins are signed distances to the threshold, positive on the passing side "
              "(decades for D1/D2, percentage points for D3).", ""]

    t1 = table1_md(report)
    if t1:
        parts += ["## Beside the published Table 1", "",
                  "This audit's configuration is the published protocol's (CIFAR-10, reference ResMLP, 100 epochs, no "
                  "penalty). Published: 3 seeds, mean ± std (ddof 1); a cell is reproduced within max(2 std, 2 pp).",
                  "", t1, ""]
    parts += ["## Figures", ""]
    parts += [f"![{k}]({v})" for k, v in figures.items()]
    parts += ["", "## Definitions", ""] + [f"- **{k}**: {v}" for k, v in report["definitions"].items()]
    parts += ["", "## Provenance", "",
              f"depthaudit {prov['version']} (git {prov['git']['commit']}, dirty={prov['git']['dirty']}), "
              f"torch {prov['torch']}, {prov['device']}; data {prov['data']['source']} "
              f"(sha256 {prov['data']['sha256'][:16]}…); started {prov['started_at']}.", ""]
    return "\n".join(parts)


def unrendered(report: dict, runs_dir) -> list[str]:
    """Quantities the audit's runs measured that no registered diagnostic renders: a plug-in's, not loaded here.

    Read from the trained runs' own records (``runs_dir/<slug>/result.json``; an unreadable one is skipped, the
    report command names damaged records itself). Their sections need that plug-in (``--plugin``).
    """
    names: set[str] = set()
    for m in report.get("methods") or []:
        for slug in (m.get("runs") or {}).get("trained") or []:
            try:
                rec = json.loads((Path(runs_dir) / slug / "result.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            for h in rec.get("history") or []:
                names.update((h.get(MEASUREMENT_KEY) or {}) if isinstance(h, dict) else ())
            names.update(rec.get(INIT_MEASUREMENT_KEY) or {})
    measured = (report.get("config") or {}).get("measured")  # a TrainingMonitor's report: no run records
    names.update(n for n in measured if isinstance(n, str)) if isinstance(measured, list) else None
    return sorted(n for n in names if n not in DIAGNOSTICS)


def unrendered_note(report: dict, out) -> str | None:
    """The stderr note for :func:`unrendered` quantities of the report in ``out`` (``None`` when there are none)."""
    missing = unrendered(report, Path(out) / "runs")
    if not missing:
        return None
    mods = set()  # the plug-ins the records name (provenance.plugins): the fix names them (walk 25 case 140)
    for m in report.get("methods") or []:
        for slug in (m.get("runs") or {}).get("trained") or []:
            try:
                rec = json.loads((Path(out) / "runs" / slug / "result.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            mods.update(p.get("module") for p in (rec.get("provenance") or {}).get("plugins") or [] if p.get("module"))
    if not mods:  # (a TrainingMonitor's report names its plug-ins in its own provenance)
        mods.update(p.get("module") for p in (report.get("provenance") or {}).get("plugins") or []
                    if isinstance(p, dict) and p.get("module"))
    mods.discard("__main__")  # (registered by a script or notebook: no module to name)
    fix = " ".join(f"--plugin {m}" for m in sorted(mods)) if mods else "--plugin MODULE"
    held = all(any(n in m for m in report.get("methods") or []) for n in missing)  # summarised in report.json?
    how = (f"rerun with {fix}" if held else  # (walk 34 case 220: `--plugin X report` then drew an empty section)
           f"rerun the audit with {fix} (its runs are reused and summarised; `depthaudit report` renders only what "
           "report.json already summarises)")
    return (f"depthaudit: note: {Path(out) / 'report.json'}: the runs measured {', '.join(missing)}, which no loaded "
            "diagnostic renders, so the report has no section for them; their sections need the plug-in that "
            f"registered them: {how}")


def _section(d, report: dict, table):
    """A diagnostic's own card section, checked: None or a (title, text) pair of strings (else one line)."""
    sec = d.section(report, table)
    if sec is None or (isinstance(sec, tuple | list) and len(sec) == 2 and all(isinstance(x, str) for x in sec)):
        return sec
    from ..errors import UsageError

    raise UsageError(f"diagnostic {d.name!r} ({d.__module__}.{d.__qualname__}): its section() returned "
                     f"{type(sec).__name__} {str(sec)[:60]}, not None or a (title, text) pair of strings; fix the "
                     "diagnostic and rerun the same command (the stored runs are reused)")
