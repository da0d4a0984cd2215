"""The published audit's Table 1 and §5, and an audit or intervention of the same protocol read beside them.

Published figures (the study's paper, 3 seeds 42/123/456, mean ± std with ddof 1; CIFAR-10, reference ResMLP
d=256 L=4, crop+flip, AdamW lr 1e-3 wd 0.01, batch 128). Table 1: 100 epochs, no penalty; its frozen-blocks
baseline is one row (blocks at init; embedding, final LayerNorm and head trained). §5: the penalty λ = 1e-2 at 30
epochs with matched unpenalised controls; the study's 30-epoch SB without penalty (0.213) is quoted without a std.
A cell is *reproduced* when ours is within 2 published std or 2 pp of the published mean, whichever is wider
(issue 34's rule).
"""

from ..verdicts import fmt_ms, fmt_num

# method -> (mean, std) of test accuracy; "frozen" is the study's one frozen-blocks baseline
TABLE1: dict[str, tuple[float, float]] = {"bp": (0.615, 0.004), "ep": (0.316, 0.037), "dfa": (0.306, 0.008),
                                          "sb": (0.205, 0.039), "cb": (0.289, 0.031), "frozen": (0.349, 0.003)}
# the study's headline Γ and max per-block stream growth ρ for the Table 1 methods it quotes them for
TABLE1_GAMMA: dict[str, float] = {"sb": 0.005, "cb": 0.07}
TABLE1_RHO: dict[str, float] = {"sb": 1.6e4, "cb": 1.2e3}
# (method, λ) -> (mean, std | None) of test accuracy at 30 epochs
SECTION5: dict[tuple[str, float], tuple[float, float | None]] = {
    ("bp", 0.0): (0.585, 0.001), ("bp", 0.01): (0.532, 0.007), ("dfa", 0.0): (0.301, 0.006),
    ("dfa", 0.01): (0.360, 0.002), ("sb", 0.0): (0.213, None), ("sb", 0.01): (0.453, 0.003),
    ("cb", 0.01): (0.360, 0.004)}
# (method, λ) -> (mean, std) of the deep-layer credit cosine the study quotes in §4–5
SECTION5_COS: dict[tuple[str, float], tuple[float, float]] = {("sb", 0.01): (0.322, 0.008),
                                                              ("cb", 0.01): (0.679, 0.010),
                                                              ("dfa", 0.01): (0.151, 0.025)}
N_SEEDS = 3
PROTOCOL = {"dataset": "cifar10", "arch": "resmlp", "variant": "ref", "d_hidden": 256, "num_blocks": 4,
            "augment": "crop+flip", "batch_size": 128, "lr": 0.001, "weight_decay": 0.01, "stop_after": None}


def is_protocol(base: dict, epochs: int) -> bool:
    """Whether a run config (``base``) is the study's recipe at ``epochs`` (its penalty is read per row)."""
    return base.get("epochs") == epochs and all(base.get(k, v) == v for k, v in PROTOCOL.items())


def verdict(ours: float | None, pub: tuple[float, float | None]) -> str:
    """``reproduced`` when |ours − published| ≤ max(2·std, 2 pp), else ``not (Δ …)``; ``—`` without ours."""
    if ours is None:
        return "—"
    mean, std = pub
    tol = max(2 * (std or 0.0), 0.02)
    return "reproduced" if abs(ours - mean) <= tol + 1e-12 else f"not ({100 * (ours - mean):+.1f} pp)"


def _pub(p: tuple[float, float | None]) -> str:
    return f"{p[0]:.3f}" + (f" ± {p[1]:.3f} (n={N_SEEDS})" if p[1] is not None else " (std not published)")


def table1_md(report: dict) -> str | None:
    """An audit's rows beside Table 1 (every row whose base method the table has, variants included), or None."""
    base = report["config"]["base"]
    if not is_protocol(base, 100) or base.get("scale_penalty", 0.0):
        return None
    out = ["| row | test acc (ours) | published | Δ pp | cell | Γ (ours / published) | D1 ρ (ours / published) |",
           "|---|---|---|---|---|---|---|"]
    for m in report["methods"]:
        name = m["method"].split(":")[0]
        if name not in TABLE1:
            continue
        acc = m["standard_pair"]["test_acc"]
        pub = TABLE1[name]
        g = m["standard_pair"]["aggregate_cosine_mean_per_layer"]
        out.append(f"| {m['method']} | {fmt_ms(acc)} | {_pub(pub)} | "
                   f"{100 * (acc['mean'] - pub[0]):+.1f} | {verdict(acc['mean'], pub)} | "
                   f"{fmt_ms(g, '.3f')} / {TABLE1_GAMMA.get(name, '—')} | "
                   f"{fmt_num(m['checks']['D1']['value'], '.3g') if m['checks']['D1']['value'] is not None else '—'}"
                   f" / {format(TABLE1_RHO[name], '.2g') if name in TABLE1_RHO else '—'} |")
        fz = m.get("frozen_test_acc")
        if fz and fz.get("mean") is not None:
            out.append(f"| {m['method']} frozen blocks | {fmt_ms(fz)} | {_pub(TABLE1['frozen'])} | "
                       f"{100 * (fz['mean'] - TABLE1['frozen'][0]):+.1f} | {verdict(fz['mean'], TABLE1['frozen'])} "
                       "| | |")
    return "\n".join(out) if len(out) > 2 else None


def section5_md(res: dict) -> str | None:
    """An intervention's rows beside §5's 30-epoch cells (λ ∈ {0, 1e-2}), or None when it is not that protocol."""
    base = next(iter(res["audits"].values()))["config"]["base"]
    if not is_protocol(base, 30) or res.get("penalty_form", "abs") != "abs":
        return None
    out = ["| row | λ | test acc (ours) | published | Δ pp | cell | Γ mean (ours) / published deep cos |",
           "|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        name = r["method"].split(":")[0]
        for d in r["by_lambda"]:
            pub = SECTION5.get((name, d["lambda"]))
            if pub is None:
                continue
            acc = d["test_acc"]["mean"]
            cos = SECTION5_COS.get((name, d["lambda"]))
            out.append(f"| {r['method']} | {d['lambda']:g} | {fmt_ms(d['test_acc'])} | {_pub(pub)} | "
                       + (f"{100 * (acc - pub[0]):+.1f}" if acc is not None else "—")
                       + f" | {verdict(acc, pub)} | {fmt_ms(d['cos_mean'], '.3f')} / "
                       + (f"{cos[0]:.3f} ± {cos[1]:.3f}" if cos else "—") + " |")
    return "\n".join(out) if len(out) > 2 else None
