"""The toward-BP experiments (`depthaudit probes`; ours, not the protocol's): does a credit closer to BP buy accuracy?

* Credit mix: for α on a grid, train with ``c(α) = (1−α)·ĉ_method + α·ĝ_BP`` and measure accuracy and
  the per-layer / aggregate cosine of the credit actually used.
* BP warm start: train BP for ``pre_epochs``, then continue with the method from that state; compare with
  the method from scratch and with BP continued, cosines tracked every epoch.
"""

import math
from dataclasses import replace
from pathlib import Path

from ..config import LEGACY, TrainConfig, nothing_trains
from ..diagnostics import INIT_MEASUREMENT_KEY, MEASUREMENT_KEY, CreditCosine, RobustCosine
from ..errors import UsageError
from ..runner import checkpoint_problem, run_slug, tracking_plan
from ..sweep import FileStore, FolderStore, RunSpec, SweepStatus, run_sweep
from ..verdicts import Thresholds, mean_std


def _final_cos(rec: dict) -> dict:
    """The standard cosine at the last measurement, with the robust concat beside it (``concat``)."""
    for h in [*reversed(rec.get("history", [])), {MEASUREMENT_KEY: rec.get(INIT_MEASUREMENT_KEY) or {}}]:
        if MEASUREMENT_KEY in h:
            p = h[MEASUREMENT_KEY]
            return {**CreditCosine.read(p), "concat": RobustCosine.read(p).get("concat")}
    return {}


def credit_mix_store(base: TrainConfig, method: str, out: Path, data_sha256: str,
                     probe_plan: tuple[int, int]) -> FileStore:
    """The α sweep's store of ``base``'s method in ``out`` (one file per method spec and configuration)."""
    ident = {k: v for k, v in base.identity_dict().items() if k not in ("seed", "device", "data_dir", "download",
                                                                   "method", "credit_mix")}
    # one file per method spec (fa, fa_head-exact), as the probes' own files; a plain name is the same file as before
    name = f"credit_mix_{base.method_spec.tag}_d{base.d_hidden}_L{base.num_blocks}_{base.dataset}.json"
    return FileStore(Path(out) / name, "depthaudit.credit_mix.v1",
                     {**ident, "method": method, "data_sha256": data_sha256, "probe": list(probe_plan)},
                     defaults={**TrainConfig().identity_dict(), **LEGACY})


def credit_mix_specs(base: TrainConfig, method: str, alphas, seeds, probe_plan: tuple[int, int] = (10, 128),
                     eps: float = 1e-8) -> list[RunSpec]:
    """The α sweep's cells, α-major (``a0.5/s1``: the keys ``--cell`` and ``--list-cells`` name)."""
    tracking = tracking_plan(*probe_plan, 0, Thresholds(eps=eps))
    return [RunSpec(f"a{a:g}/s{s}", replace(base, method=method, seed=s, credit_mix=float(a)), tracking)
            for a in alphas for s in seeds]


def credit_mix_sweep(base: TrainConfig, method: str, alphas, seeds, out: Path, data, data_sha256: str,
                  probe_plan: tuple[int, int] = (10, 128), eps: float = 1e-8, jobs: int = 1, log=None, argv=None,
                  opts=None) -> dict | SweepStatus:
    """Run (or resume) the α sweep and return its summary table (``probe_plan`` = (probe batches, their size)).

    A sweep that stopped short (``--list-cells``, ``--cell``) is returned as its :class:`~depthaudit.sweep.SweepStatus`.
    """
    specs = credit_mix_specs(base, method, alphas, seeds, probe_plan, eps)
    store = credit_mix_store(base, method, out, data_sha256, probe_plan)
    status = run_sweep(specs, store, data=data, jobs=jobs, log=log, argv=argv, opts=opts)
    if not status.complete:
        return status
    recs = status.records
    rows = []
    for a in alphas:
        every = [recs[f"a{a:g}/s{s}"] for s in seeds]
        rs = [r for r in every if r.get("status") != "diverged"]  # a diverged run is a status, not a result
        cos = [_final_cos(r) for r in rs]
        L1 = max((len(c.get("per_layer", [])) for c in cos), default=0)
        rows.append({"alpha": float(a), "diverged": len(every) - len(rs),
                     "test_acc": mean_std([r["final"]["test_acc"] for r in rs]),
                     "cos_mean_per_layer": mean_std([c.get("mean_per_layer") for c in cos]),
                     "cos_concat": mean_std([c.get("concat") for c in cos]),
                     "per_layer": [mean_std([c["per_layer"][i] for c in cos]) for i in range(L1)]})
    xs = [r["cos_mean_per_layer"]["mean"] for r in rows]
    ys = [r["test_acc"]["mean"] for r in rows]
    return {"method": method, "file": str(store.path), "rows": rows, "pearson_cos_acc": pearson(xs, ys)}


def pearson(xs, ys) -> float | None:
    """Pearson correlation of paired values (None when undefined)."""
    pts = [(x, y) for x, y in zip(xs, ys, strict=True) if x is not None and y is not None]
    if len(pts) < 3:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxy = sum((x - mx) * (y - my) for x, y in pts)
    sx = math.sqrt(sum((x - mx) ** 2 for x, _ in pts))
    sy = math.sqrt(sum((y - my) ** 2 for _, y in pts))
    return sxy / (sx * sy) if sx > 0 and sy > 0 else None


def warm_start_specs(base: TrainConfig, method: str, pre_epochs: int, seeds, out: Path,
                     probe_plan: tuple[int, int] = (10, 128), eps: float = 1e-8) -> tuple[list, list]:
    """The warm start's two stages: the BP pre-runs (each writes a checkpoint), then the three arms from them."""
    root = Path(out) / "warm_start"
    track = tracking_plan(*probe_plan, 1, Thresholds(eps=eps))
    pre = []
    for s in seeds:  # each pre-run's checkpoint is named by its config (--pre-epochs, lr, …): two probes of other
        cfg = replace(base, method="bp", method_options={}, seed=s, epochs=pre_epochs, stop_after=None)
        pre.append(RunSpec(f"bp_pre/s{s}", cfg, track,  # pre-runs in one folder never share one file
                           checkpoint=str(root / f"bp_pre_{run_slug(cfg, track)}.pt")))
    arms = []
    for s, spec in zip(seeds, pre, strict=True):
        arms += [RunSpec(f"{method}_from_bp/s{s}", replace(base, method=method, seed=s, warm_start=spec.checkpoint),
                         track),
                 RunSpec(f"{method}_scratch/s{s}", replace(base, method=method, seed=s), track),
                 RunSpec(f"bp_continued/s{s}", replace(base, method="bp", method_options={}, seed=s,
                                                       warm_start=spec.checkpoint), track)]
    return pre, arms


def warm_start_store(out: Path, data) -> FolderStore:
    """Where the warm start's runs are stored (``OUT/warm_start/runs``)."""
    return FolderStore(Path(out) / "warm_start" / "runs", getattr(data, "sha256", None))


def bp_warm_start(base: TrainConfig, method: str, pre_epochs: int, seeds, out: Path, data,
                  probe_plan: tuple[int, int] = (10, 128), eps: float = 1e-8, log=None, argv=None,
                  stored_only: bool = False) -> dict:
    """BP for ``pre_epochs`` → checkpoint; then method-from-BP-state, method-from-scratch, BP-continued.

    ``stored_only`` (``depthaudit report`` of a probes folder run by cells) trains nothing: a missing run is one line.
    """
    store = warm_start_store(out, data)
    if stored_only:
        with nothing_trains():  # (the arms name their pre-run's checkpoint, which need not exist to read them)
            pre, arm_specs = warm_start_specs(base, method, pre_epochs, seeds, out, probe_plan, eps)
        missing = [s.key for s in pre + arm_specs if store.get(s, quiet=True) is None]
        if missing:
            raise UsageError(f"the BP warm start's runs are not stored ({', '.join(missing[:4])}"
                             f"{', …' if len(missing) > 4 else ''}); they are not --cell cells: run the probes command "
                             "once without --cell to train them, then report")
        recs = {s.key: store.get(s) for s in arm_specs}  # (their pre-runs' checkpoints are not needed again)
    else:
        with nothing_trains():  # the arms are built now; the checkpoints they name are written by the pre-runs
            pre, arm_specs = warm_start_specs(base, method, pre_epochs, seeds, out, probe_plan, eps)
        for spec in pre:  # a reused pre-run still needs its own checkpoint on disk (not one swapped in)
            rec = store.get(spec)
            bad = None if rec is None else ("is missing" if not Path(spec.checkpoint).exists()
                                            else checkpoint_problem(Path(spec.checkpoint), rec))
            if bad:
                if log is not None:
                    log(f"depthaudit: note: {spec.checkpoint} {bad}; {spec.key} trains again to rewrite it")
                store.path(spec).unlink(missing_ok=True)
        run_sweep(pre, store, data=data, log=log, argv=argv)
        # the checkpoints exist now: each arm names its weights by their sha256 too (the same weights reused from a
        # folder moved or named by another path; other weights under the same path: another run)
        pre, arm_specs = warm_start_specs(base, method, pre_epochs, seeds, out, probe_plan, eps)
        recs = run_sweep(arm_specs, store, data=data, log=log, argv=argv).records
    rows = []
    for arm in (f"{method}_from_bp", f"{method}_scratch", "bp_continued"):
        every = [recs[f"{arm}/s{s}"] for s in seeds]
        rs = [r for r in every if r.get("status") != "diverged"]  # a diverged run is a status, not a result
        start = [_final_cos({INIT_MEASUREMENT_KEY: r.get(INIT_MEASUREMENT_KEY)}) for r in rs]
        end = [_final_cos(r) for r in rs]
        rows.append({"arm": arm, "diverged": len(every) - len(rs),
                     "test_acc": mean_std([r["final"]["test_acc"] for r in rs]),
                     "cos_mean_start": mean_std([c.get("mean_per_layer") for c in start]),
                     "cos_mean_end": mean_std([c.get("mean_per_layer") for c in end]),
                     "cos_concat_end": mean_std([c.get("concat") for c in end]),
                     "history": [[h["epoch"], h["test_acc"],
                                  CreditCosine.read(h.get(MEASUREMENT_KEY)).get("mean_per_layer")]
                                 for h in (rs or every)[0]["history"]]})
    return {"method": method, "pre_epochs": pre_epochs, "rows": rows}
