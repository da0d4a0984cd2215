"""The audit report card: the standard pair beside the protocol's verdicts, per-layer detail, identity."""


def fmt_ms(ms: dict | None, fmt: str = ".3f") -> str:
    """``0.389 ± 0.001`` (or just the mean when n < 2); ``—`` when missing."""
    if not ms or ms.get("mean") is None:
        return "—"
    s = format(ms["mean"], fmt)
    return s if ms.get("std") is None else f"{s} ± {format(ms['std'], fmt)}"


def _check(c: dict, fmt: str) -> str:
    v = "—" if c["value"] is None else format(c["value"], fmt)
    m = c["margin"]
    m = "—" if m is None else f"{m:+.1f}"
    return f"{v} {c['status']} ({m})"


def _rows(report: dict) -> list[list[str]]:
    rows = []
    for m in report["methods"]:
        sp, ck = m["standard_pair"], m["checks"]
        rows.append([m["method"], fmt_ms(sp["test_acc"]), fmt_ms(sp["aggregate_cosine_mean_per_layer"]),
                     fmt_ms(sp["aggregate_cosine_concat"]), _check(ck["D1"], ".3g"), _check(ck["D2"], ".2e"),
                     _check(ck["D3"], "+.1f"), "FLAG " + ",".join(m["flags"]) if m["flags"] else "PASS"])
    return rows


def _headers(report: dict) -> list[str]:
    th = report["thresholds"]
    return ["method", "test acc", "cos mean/layer", "cos concat", f"D1 ρ (flag >{th['rho_max']:g})",
            f"D2 ‖g_L‖ (flag <{th['ref_factor'] * th['eps']:.0e})", f"D3 gap pp (flag <{th['gap_min_pp']:g})",
            "verdict"]


def _layer_rows(report: dict, key: str) -> list[list[str]]:
    return [[m["method"], *(fmt_ms(v) for v in m[key])] for m in report["methods"]]


def _table_text(headers, rows) -> str:
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True))  # noqa: E731
    return "\n".join([line(headers), "  ".join("-" * w for w in widths), *(line(r) for r in rows)])


def _table_md(headers, rows) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(out + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows])


def _title(report: dict) -> str:
    c = report["config"]
    b = c["base"]
    return (f"depthaudit audit — {b['dataset']}, {b['arch']} d={b['d_hidden']} L={b['num_blocks']}, "
            f"{b['epochs']} epochs, seeds {c['seeds']}, probe batch {c['probe_size']}")


def _sections(report: dict, table) -> list[tuple[str, str]]:
    L = report["config"]["base"]["num_blocks"]
    ident = report["identity"]["summary"]
    id_rows = [[f"block {i + 1}: ‖f_l(h_(l-1))‖/‖h_(l-1)‖", fmt_ms(v)] for i, v in enumerate(ident["block_ratio"])]
    id_rows += [["stack: ‖h_L − h_0‖/‖h_0‖", fmt_ms(ident["stack_rel_change"])],
                ["stack: cos(h_L, h_0)", fmt_ms(ident["stack_cos"])]]
    return [
        ("Standard pair vs protocol (value STATUS (margin))", table(_headers(report), _rows(report))),
        ("Per-layer credit cosine cos(c_l, g_l), end of training",
         table(["method", *(f"l={i}" for i in range(L + 1))], _layer_rows(report, "per_layer_cosine"))),
        ("Per-block update cosine (block's surrogate gradient vs its BP gradient)",
         table(["method", *(f"block {i + 1}" for i in range(L))], _layer_rows(report, "update_cosine"))),
        ("Depth utility: test accuracy trained vs frozen-blocks baseline",
         table(["method", "trained", "frozen", "gap pp"],
               [[m["method"], fmt_ms(m["trained_test_acc"]), fmt_ms(m["frozen_test_acc"]),
                 fmt_ms({"mean": m["checks"]["D3"]["value"], "std": m["checks"]["D3"]["std"]}, "+.1f")]
                for m in report["methods"]])),
        ("Frozen-init identity check (at initialisation, probe batch, over seeds)",
         table(["quantity", "mean ± std"], id_rows)),
    ]


def audit_terminal(report: dict) -> str:
    """Plain-text report card for the terminal."""
    parts = [_title(report), ""]
    for title, body in _sections(report, _table_text):
        parts += [title, body, ""]
    parts.append("Margins: decades for D1/D2, pp for D3; positive = passing side.")
    return "\n".join(parts)


def audit_markdown(report: dict, figures: dict[str, str]) -> str:
    """``report.md``: the card as Markdown tables, the figures, definitions and provenance."""
    prov = report["provenance"]
    parts = [f"# {_title(report)}", ""]
    for title, body in _sections(report, _table_md):
        parts += [f"## {title}", "", body, ""]
    parts += ["Margins are signed distances to the threshold, positive on the passing side "
              "(decades for D1/D2, percentage points for D3).", "", "## Figures", ""]
    parts += [f"![{k}]({v})" for k, v in figures.items()]
    parts += ["", "## Definitions", ""] + [f"- **{k}**: {v}" for k, v in report["definitions"].items()]
    parts += ["", "## Provenance", "",
              f"depthaudit {prov['version']} (git {prov['git']['commit']}, dirty={prov['git']['dirty']}), "
              f"torch {prov['torch']}, {prov['device']}; data {prov['data']['source']} "
              f"(sha256 {prov['data']['sha256'][:16]}…); started {prov['started_at']}.", ""]
    return "\n".join(parts)
