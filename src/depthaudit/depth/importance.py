"""Depth-importance scores of a residual LM's blocks, side by side with AG and V, against the measured removal loss.

Block ``ℓ = 1..L`` maps the stream ``h_{ℓ-1}`` to ``h_ℓ`` (``h_0``: after the embeddings; ``h_L``: before the final
norm). Per held-out window, from the **one** forward + backward of :func:`depthaudit.depth.growth.activation_gradients`
(an ``observe`` callback, :class:`StreamScores`):

* **Block Influence** (ShortGPT, Men et al. 2024): ``BI_ℓ = 1 − cos(h_{ℓ-1}, h_ℓ)``, averaged over the positions.
* **Angular distance** (Gromov et al., ICLR 2025): ``d(h_ℓ, h_{ℓ+n}) = arccos(cos(h_ℓ, h_{ℓ+n}))/π`` for each n asked,
  averaged over all positions (``angular``) and at the window's last position only (``angular_last``, the paper's
  choice). Its pruning rule for n blocks: ``ℓ* = argmin_ℓ d(h_ℓ, h_{ℓ+n})``, remove blocks ``ℓ*+1 … ℓ*+n``.
* **AG at the block's output** ``‖∂ℓ/∂h_ℓ‖`` and **V** at that boundary (ours: the first-order value of inserting a
  zero block after block ℓ), as :func:`activation_gradients` reports them.
* **First-order removal estimate** (ours, a Taylor score): removing block ℓ moves ``h_ℓ`` by ``−(h_ℓ − h_{ℓ-1})``,
  so to first order ``Δloss_ℓ ≈ −⟨∂ℓ/∂h_ℓ, h_ℓ − h_{ℓ-1}⟩`` (summed over the window's positions).

The ground truth is measured, not estimated: the held-out loss with block ℓ skipped (its output replaced by its
input, :func:`depthaudit.models.hf.skip_layers`) minus the loss of the intact model, per window, forward only; and
the same for each n-block set a rule would prune. Spearman rank correlations of every score with the measured
single-block increase carry a percentile bootstrap interval over windows (windows resampled with replacement;
V, measured per batch, is held fixed in the resamples). Every score is correlated on the same resamples, so the best
score's lead over each other score has a paired interval too.

Cosines are taken in float64 as ``a·b / sqrt((a·a)(b·b))``, so a block whose output equals its input has cosine
exactly 1: Block Influence and angular distance exactly 0.
"""

import math
import time

import numpy as np
import torch
import torch.nn.functional as F

from ..models.hf import skip_layers


def rankdata(x) -> np.ndarray:
    """Ranks 1..n of ``x``, ties given their average rank (as ``scipy.stats.rankdata``'s default)."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x), dtype=np.float64)
    sx = x[order]
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and sx[j + 1] == sx[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(a, b) -> float:
    """Spearman's ρ: Pearson correlation of the average ranks; NaN when either side is constant."""
    ra, rb = rankdata(a), rankdata(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = math.sqrt(float((ra * ra).sum()) * float((rb * rb).sum()))
    return float((ra * rb).sum() / den) if den > 0 else float("nan")


def cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Cosine along the last axis in float64, ``a·b / sqrt((a·a)(b·b))`` clamped to [−1, 1] (exactly 1 for a = b)."""
    a, b = a.double(), b.double()
    den = ((a * a).sum(-1) * (b * b).sum(-1)).sqrt()
    cos = (a * b).sum(-1) / den
    return torch.where(den > 0, cos, torch.ones_like(cos)).clamp(-1.0, 1.0)


def angular(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``arccos(cos(a, b))/π`` along the last axis (0: same direction, 1: opposite)."""
    return torch.arccos(cosine(a, b)) / math.pi


class StreamScores:
    """``observe`` callback for :func:`activation_gradients`: per-window scores from its forward and backward.

    Collects per window (rows) and layer boundary or block (columns): Block Influence, the angular distance for
    each ``n`` (all positions and last position), the per-example activation-gradient norm ``‖∂ℓ_b/∂h_{l,b}‖``
    and the first-order removal estimate.
    """

    def __init__(self, ns=(1,)):
        self.ns = tuple(sorted(set(int(n) for n in ns)))
        self.bi, self.ag, self.first = [], [], []
        self.ang = {n: [] for n in self.ns}
        self.ang_last = {n: [] for n in self.ns}

    def __call__(self, x, y, logits, states, qs) -> None:
        """One batch: ``states`` = [h_0 … h_L] (B, T, d), ``qs`` their gradients of the batch's mean loss."""
        with torch.no_grad():
            bsz = x.shape[0]
            big_l = len(states) - 1
            self.bi.append(torch.stack([1 - cosine(states[i - 1], states[i]).mean(-1)
                                        for i in range(1, big_l + 1)], 1))
            for n in (n for n in self.ns if n <= big_l):  # a step longer than the model has no pair
                self.ang[n].append(torch.stack([angular(states[i], states[i + n]).mean(-1)
                                                for i in range(big_l - n + 1)], 1))
                self.ang_last[n].append(torch.stack([angular(states[i][:, -1], states[i + n][:, -1])
                                                     for i in range(big_l - n + 1)], 1))
            self.ag.append(torch.stack([q.double().flatten(1).norm(dim=1) * bsz for q in qs], 1))
            # per-window loss convention (×B): Δℓ_b ≈ −⟨∂ℓ_b/∂h_ℓ, h_ℓ − h_{ℓ-1}⟩
            self.first.append(torch.stack([-(qs[i].double() * (states[i] - states[i - 1]).double()).flatten(1).sum(1)
                                           * bsz for i in range(1, big_l + 1)], 1))

    def arrays(self) -> dict:
        """Everything collected, as (windows × columns) float64 numpy arrays."""
        cat = lambda rows: torch.cat(rows).cpu().numpy()  # noqa: E731
        return {"BI": cat(self.bi), "AG_window": cat(self.ag), "first_order": cat(self.first),
                "angular": {n: cat(v) for n, v in self.ang.items() if v},
                "angular_last": {n: cat(v) for n, v in self.ang_last.items() if v}}


def window_losses(model, batches) -> torch.Tensor:
    """Per-window mean next-token cross-entropy (float64), forward only, model as it is (eval)."""
    out = []
    with torch.no_grad():
        for x, y in batches:
            logits = model(x)
            ce = F.cross_entropy(logits.flatten(0, -2).float(), y.flatten(), reduction="none")
            out.append(ce.view(y.shape).double().mean(1))
    return torch.cat(out)


def removal_losses(model, layers, batches, sets, log=None) -> tuple[np.ndarray, dict]:
    """``(per-window loss of the intact model, {blocks: per-window loss with those blocks skipped})``.

    ``sets``: tuples of 1-based block indices. Each set costs one forward pass over the windows.
    """
    todo = list(dict.fromkeys(tuple(sorted(s)) for s in sets))
    t0 = time.perf_counter()
    base = window_losses(model, batches).cpu().numpy()
    per = time.perf_counter() - t0  # one pass: what each removal costs
    if log:
        log(f"  removal passes: the intact model took {per:.0f} s; {len(todo)} removals to go "
            f"(~{per * len(todo):.0f} s)")
    out = {}
    for k, blocks in enumerate(todo):
        with skip_layers(layers, [b - 1 for b in blocks]):
            out[blocks] = window_losses(model, batches).cpu().numpy()
        if log:  # every pass: a real-LM pass takes minutes, and silence reads as a hang
            left = (time.perf_counter() - t0) / (k + 2) * (len(todo) - k - 1)
            log(f"  removal pass {k + 1}/{len(todo)} (blocks {', '.join(map(str, blocks))}) done; ~{left:.0f} s left")
    return base, out


def lowest(scores, n: int) -> tuple:
    """The 1-based blocks of the ``n`` lowest scores (ties by position)."""
    order = sorted(range(len(scores)), key=lambda i: (scores[i], i))
    return tuple(sorted(i + 1 for i in order[:n]))


def angular_rule(dist, n: int) -> tuple:
    """Gromov et al.'s choice: the blocks ``ℓ*+1 … ℓ*+n`` with ``ℓ* = argmin_ℓ d(h_ℓ, h_{ℓ+n})`` (first on ties)."""
    start = min(range(len(dist)), key=lambda i: (dist[i], i))
    return tuple(range(start + 1, start + n + 1))


def bootstrap_spearman(scores: dict, target_w: np.ndarray, reps: int, seed: int) -> dict:
    """Spearman ρ of every score with the target on the **same** window resamples: ``{name: array of reps ρ}``.

    ``scores[name]`` is ``(kind, values)``: ``("mean", W × K)`` per-window values averaged per resample,
    ``("rms", W × K)`` per-window values aggregated as ``sqrt(mean(v²))``, or ``("fixed", K)`` held fixed.
    ``target_w`` (W × K) is averaged per resample. One resample serves every score, so differences of ρ are paired.
    """
    rng = np.random.default_rng(seed)
    w = target_w.shape[0]
    out = {k: np.empty(reps) for k in scores}
    for r in range(reps):
        idx = rng.integers(0, w, w)
        t = target_w[idx].mean(0)
        for k, (kind, v) in scores.items():
            s = v if kind == "fixed" else np.sqrt((v[idx] ** 2).mean(0)) if kind == "rms" else v[idx].mean(0)
            out[k][r] = spearman(s, t)
    return out


def _interval(vals: np.ndarray) -> list:
    vals = vals[vals == vals]
    return [float(np.percentile(vals, 2.5)), float(np.percentile(vals, 97.5))] if len(vals) else [float("nan")] * 2


def depth_importance(model, layers, batches, scores: StreamScores, sig: dict, ns=(1, 2, 4, 8), reps: int = 1000,
                     seed: int = 0, log=None) -> dict:
    """The side-by-side record: per-block scores, measured removal losses, rank correlations and pruned sets.

    ``scores`` has observed the analysis pass that produced ``sig`` (:func:`activation_gradients` with
    ``observe=scores``) on the same ``batches``; ``layers`` is the model's block list (skipped by hooks).
    """
    big_l = len(layers)
    arr = scores.arrays()
    # ground truth: every single block skipped
    singles = [(b,) for b in range(1, big_l + 1)]
    base, removed = removal_losses(model, layers, batches, singles, log)
    dloss_w = np.stack([removed[s] - base for s in singles], 1)  # (W, L)
    dloss = dloss_w.mean(0)
    ag_blocks = [sig["AG"][b] for b in range(1, big_l + 1)]  # AG at the block's output boundary h_ℓ
    per_block = {
        "delta_loss": dloss.tolist(),
        "delta_loss_se": (dloss_w.std(0, ddof=1) / math.sqrt(dloss_w.shape[0])).tolist() if dloss_w.shape[0] > 1
        else [float("nan")] * big_l,
        "BI": arr["BI"].mean(0).tolist(),
        "angular_1": arr["angular"][1].mean(0).tolist() if 1 in arr["angular"] else None,
        "AG": ag_blocks,
        "V": [sig["V"][b] for b in range(1, big_l + 1)] if sig.get("V") else None,
        "first_order": arr["first_order"].mean(0).tolist(),
    }
    # per-window versions for the bootstrap (AG: root mean square of the per-example norm, which ranks as AG)
    window = {"BI": ("mean", arr["BI"]), "angular_1": ("mean", arr["angular"].get(1)),
              "first_order": ("mean", arr["first_order"]), "AG": ("rms", arr["AG_window"][:, 1:]),
              "V": ("fixed", np.asarray(per_block["V"]) if per_block["V"] else None)}
    window = {k: v for k, v in window.items() if v[1] is not None}
    boot = bootstrap_spearman(window, dloss_w, reps, seed)
    corr = {k: {"spearman": spearman(per_block[k], dloss), "ci95": _interval(boot[k])} for k in window}
    best = max(corr, key=lambda k: (corr[k]["spearman"], k))
    versus = {k: {"difference": corr[best]["spearman"] - corr[k]["spearman"], "ci95": _interval(boot[best] - boot[k]),
                  "share_best_higher": float(np.mean(boot[best] > boot[k]))} for k in corr if k != best}
    # n-block removal: each rule's choice, measured
    rules = {}
    sets = []
    for n in (n for n in ns if 1 <= n < big_l):
        choice = {"angular (Gromov)": angular_rule(arr["angular"][n].mean(0), n) if n in arr["angular"] else None,
                  "angular, last position": angular_rule(arr["angular_last"][n].mean(0), n)
                  if n in arr["angular_last"] else None,
                  "BI lowest (ShortGPT)": lowest(per_block["BI"], n),
                  "AG lowest": lowest(ag_blocks, n),
                  "V lowest": lowest(per_block["V"], n) if per_block["V"] else None,
                  "first-order lowest": lowest(per_block["first_order"], n),
                  "measured single-skip lowest": lowest(dloss.tolist(), n)}
        rules[n] = {k: v for k, v in choice.items() if v is not None}
        sets += [s for s in rules[n].values() if len(s) > 1]
    _, multi = removal_losses(model, layers, batches, sets, log) if sets else (None, {})
    removed.update(multi)
    pruning = {}
    for n, choice in rules.items():
        pruning[str(n)] = [{"rule": rule, "blocks": list(s), "delta_loss": float((removed[s] - base).mean()),
                            "delta_loss_se": float((removed[s] - base).std(ddof=1) / math.sqrt(len(base)))
                            if len(base) > 1 else float("nan")} for rule, s in choice.items()]
    return {"blocks": big_l, "windows": int(dloss_w.shape[0]), "base_loss": float(base.mean()),
            "per_block": per_block, "spearman": corr, "bootstrap": {"reps": reps, "seed": seed, "unit": "window"},
            "best_rank_score": {"score": best, "versus": versus},
            "per_window": {"delta_loss": dloss_w.tolist(), **{k: v.tolist() for k, (kind, v) in window.items()
                                                               if kind != "fixed"}},
            "angular": {str(n): v.mean(0).tolist() for n, v in arr["angular"].items()},
            "angular_last": {str(n): v.mean(0).tolist() for n, v in arr["angular_last"].items()},
            "pruning": pruning, "removal_passes": 1 + len(singles) + len(set(sets))}
