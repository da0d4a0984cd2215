"""The published depth-utility ladder, and a ladder of the same protocol read beside it.

The study's ladder (CIFAR-10, reference ResMLP, 100 epochs, crop+flip, AdamW lr 1e-3 wd 0.01, batch 128, no
penalty; seeds 42/123/456, mean ± std with ddof 1). The study's "FA" is depthaudit's ``fa-stream`` (a fixed
random matrix per block carrying the top credit down the stream); its per-weight FA (``fa``) was not published.
"""

from .card import fmt_ms

# (d_hidden, num_blocks) -> method -> [(mean, std) for k = 0..L]
LADDER: dict[tuple[int, int], dict[str, list[tuple[float, float]]]] = {
    (256, 4): {"bp": [(0.389, 0.001), (0.565, 0.003), (0.598, 0.003), (0.608, 0.001), (0.617, 0.002)],
               "fa-stream": [(0.355, 0.003), (0.382, 0.008), (0.349, 0.016), (0.398, 0.008), (0.402, 0.009)],
               "dfa": [(0.349, 0.003), (0.244, 0.015), (0.286, 0.013), (0.296, 0.008), (0.301, 0.006)]},
    (512, 2): {"bp": [(0.386, 0.003), (0.583, 0.002), (0.603, 0.001)],
               "fa-stream": [(0.359, 0.000), (0.412, 0.004), (0.361, 0.003)],
               "dfa": [(0.349, 0.005), (0.226, 0.015), (0.302, 0.005)]},
}
NAMES = {"bp": "BP", "fa-stream": "FA", "dfa": "DFA"}  # depthaudit's name -> the study's
N_SEEDS = 3
# the protocol's recipe: a ladder is read beside the published one only when its identity has these values
PROTOCOL = {"dataset": "cifar10", "arch": "resmlp", "variant": "ref", "mlp_ratio": 1, "augment": "crop+flip",
            "epochs": 100, "batch_size": 128, "lr": 0.001, "weight_decay": 0.01, "scale_penalty": 0.0,
            "stop_after": None, "warm_start": None, "credit_mix": None}


def published_ladder(identity: dict) -> dict[str, list[tuple[float, float]]] | None:
    """The published ladder of this ladder's shape, or None when its configuration is not the published protocol's."""
    if any(identity.get(k, v) != v for k, v in PROTOCOL.items()):
        return None
    return LADDER.get((identity.get("d_hidden"), identity.get("num_blocks")))


def _reading(series: list[float | None]) -> tuple[str, str, str]:
    """(monotone in k, best rung, gain k=0→k=L in pp) of a list of means indexed by k."""
    pts = [(k, m) for k, m in enumerate(series) if m is not None]
    if not pts:
        return "—", "—", "—"
    mono = all(b >= a for (_, a), (_, b) in zip(pts, pts[1:], strict=False))
    best = max(pts, key=lambda kv: kv[1])[0]
    gain = f"{100 * (series[-1] - series[0]):+.1f}" if series[0] is not None and series[-1] is not None else "—"
    return ("yes" if mono else "no"), f"k={best}", gain


def beside_published_md(agg: dict, published: dict[str, list[tuple[float, float]]]) -> str:
    """Ours and the published ladder cell by cell (Δ in pp), then each method's reading (monotone, best rung, gain)."""
    methods = [m for m in published if m in agg["table"]]
    if not methods:
        return "(no method of the published ladder — bp, fa-stream, dfa — is in this file)"
    head = " | ".join(f"{m} (ours) | {NAMES[m]} (published) | Δ pp" for m in methods)
    out = [f"| k | {head} |", "|---|" + "---|---|---|" * len(methods)]
    L = len(next(iter(published.values()))) - 1
    for k in range(L + 1):
        cells = []
        for m in methods:
            c = agg["table"][m].get(k)
            pm, ps = published[m][k]
            ours = f"{fmt_ms(c)} (n={c['n']})" if c else "—"
            delta = f"{100 * (c['mean'] - pm):+.1f}" if c and c.get("mean") is not None else "—"
            cells += [ours, f"{pm:.3f} ± {ps:.3f} (n={N_SEEDS})", delta]
        out.append(f"| {k} | " + " | ".join(cells) + " |")
    rows = ["", "| method | monotone in k (ours / published) | best rung (ours / published) | "
            "gain k=0→k=L pp (ours / published) |", "|---|---|---|---|"]
    for m in methods:
        ours = _reading([(agg["table"][m].get(k) or {}).get("mean") for k in range(L + 1)])
        pub = _reading([pm for pm, _ in published[m]])
        rows.append(f"| {m} ({NAMES[m]}) | " + " | ".join(f"{a} / {b}" for a, b in zip(ours, pub, strict=True)) + " |")
    return "\n".join(out + rows)
