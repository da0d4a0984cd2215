"""The audit protocol (SPEC §3): per method, a tracked full run and its frozen-blocks baseline, then verdicts."""

import math
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from ..config import TrainConfig
from ..data import DataBundle
from ..diagnostics import (
    INIT_MEASUREMENT_KEY,
    MEASUREMENT_KEY,
    CKAToBP,
    ReferenceNorm,
    StreamNorms,
    Tracker,
    registered,
)
from ..diagnostics.base import RESERVED_NAMES
from ..diagnostics.identity import identity_over_seeds
from ..errors import UsageError
from ..fields import (
    arg,
    d1_stat_field,
    methods_field,
    probe_batch_size_field,
    probe_batches_field,
    refuse,
    seeds_field,
)
from ..loop import build
from ..methods import parse_method_spec
from ..provenance import provenance
from ..runner import checkpoint_problem, probe_batch, run_slug, tracking_plan
from ..runner import probe_batches as draw_probes
from ..stores import read_record, unsealed
from ..sweep import FolderStore, RunSpec, SweepStatus, run_sweep
from ..verdicts import Thresholds, accuracy_gap_pp, check_d1, check_d2, check_d3, decision_table, mean_std
from .resolve import resolve_sweep
from .shallow import matched_shallow, shallow_config

SCHEMA = "depthaudit.audit.v2"


@dataclass(frozen=True)
class AuditConfig:
    """What the audit runs: the base training config, methods, seeds, probe batches and thresholds."""

    base: TrainConfig
    methods: tuple[str, ...] = methods_field()
    seeds: tuple[int, ...] = seeds_field()
    probe_batches: int = probe_batches_field()  # the reference: 10 held-out batches of 128
    probe_batch_size: int = probe_batch_size_field()
    track_every: int = arg(1, help="measure every N epochs; 0 = end only", lo=0)
    thresholds: Thresholds = field(default_factory=Thresholds)
    d1_stat: str = d1_stat_field()  # the reference's final form; "mean" is the option
    stop_on_flag: bool = arg(False, help="end a trained run at the epoch D1 or D2 first fires (status "
                             "stopped_flagged)")
    functional: bool = arg(False, help="also measure perturbation correlation, nudging and the fresh-B null at "
                           "the end")
    fresh_b_draws: int = arg(20, help="with --functional: fresh feedback draws of the null; 0 = skip", lo=0,
                             advanced=True)
    shallow_blocks: int = 0  # > 0: also train the parameter-matched shallow baseline with this many blocks (ours)

    def __post_init__(self):
        resolve_sweep(self)  # types, ranges, methods parsed and checked, seeds once (the base's seed the first), ...
        if self.base.num_blocks < 1:
            raise refuse(self, "{num_blocks} 0: the audit measures residual blocks; give at least 1")
        if self.track_every > self.base.epochs:  # every N beyond the budget measures init and the end, as N = the
            object.__setattr__(self, "track_every", self.base.epochs)  # budget does: one run (walk 24 case 198)
        if self.stop_on_flag and self.track_every != 1:  # (after that: a 1-epoch budget's 2 is its 1, walk 32 c. 206)
            raise refuse(self, "{stop_on_flag=True} needs the monitor every epoch; drop {track_every} or set it to 1")
        if not self.functional:  # the null's draws without the functional measurements: idle, so no other audit
            object.__setattr__(self, "fresh_b_draws", 20)  # (walk 19 case 130: noted idle, yet "another audit")

    def to_dict(self) -> dict:
        """JSON-able (the base config nested)."""
        d = asdict(self)
        d["methods"], d["seeds"] = list(self.methods), list(self.seeds)
        return d


def _num(v) -> float:
    return math.nan if v is None else float(v)


def _final_measurement(rec: dict) -> dict:
    for h in reversed(rec["history"]):
        if MEASUREMENT_KEY in h:
            return h[MEASUREMENT_KEY]
    return rec.get(INIT_MEASUREMENT_KEY) or {}


def _trajectory(rec: dict) -> list[tuple[int, dict]]:
    pts = [(0, rec[INIT_MEASUREMENT_KEY])] if rec.get(INIT_MEASUREMENT_KEY) else []
    return pts + [(h["epoch"], h[MEASUREMENT_KEY]) for h in rec["history"] if MEASUREMENT_KEY in h]


def _monitor_summary(trained: list[dict]) -> dict:
    """Per check: the epoch it first fired in each seed (None = never) and the compute a stop there saves."""
    out = {}
    for name in ("D1", "D2"):
        epochs = [((r.get("monitor") or {}).get("fired") or {}).get(name) for r in trained]
        epochs = [e["epoch"] if e else None for e in epochs]
        budgets = [r["config"]["epochs"] for r in trained]
        saved = [1 - e / b if e is not None else None for e, b in zip(epochs, budgets, strict=True)]
        out[name] = {"first_fired_epoch": epochs, "compute_saved": saved,
                     "tracked": all(r.get("monitor") is not None for r in trained)}
    out["stopped_at_epoch"] = [r["final"].get("stopped_at_epoch") for r in trained]
    return out


def summarise_method(method: str, trained: list[dict], frozen: list[dict], th: Thresholds) -> dict:
    """Aggregate one method's seeds into the standard pair, the three checks and per-layer detail."""
    statuses = [r["status"] for r in trained]
    pairs = [(t, f) for t, f in zip(trained, frozen, strict=True) if "diverged" not in (t["status"], f["status"])]
    diverged = {"trained": sum(r["status"] == "diverged" for r in trained),
                "frozen": sum(r["status"] == "diverged" for r in frozen),
                "excluded_seeds": len(trained) - len(pairs), "n_seeds": len(trained)}
    L, everyone = trained[0]["config"]["num_blocks"], trained
    # a diverged run is a finding, reported as such, never averaged into a number: the aggregates below see
    # only the seeds whose trained and frozen runs both finished (none at all when every seed diverged)
    trained, frozen = [t for t, _ in pairs], [f for _, f in pairs]
    finals = [_final_measurement(r) for r in trained]
    acc_t = [r["final"]["test_acc"] for r in trained]
    acc_f = [r["final"]["test_acc"] for r in frozen]
    gaps = [accuracy_gap_pp(_num(a), _num(b)) for a, b in zip(acc_t, acc_f, strict=True)]
    rho = [_num(StreamNorms.read(p).get("rho")) for p in finals]  # D1's and D2's quantities
    g_l = [_num(ReferenceNorm.read(p).get("g_L")) for p in finals]
    per_seed_checks = [{"D1": check_d1(r, th)["status"], "D2": check_d2(g, th)["status"],
                        "D3": check_d3(gp, th)["status"]} for r, g, gp in zip(rho, g_l, gaps, strict=True)]
    agg = {"rho": mean_std(rho), "g_L": mean_std(g_l), "gap_pp": mean_std(gaps)}
    checks = {"D1": check_d1(_num(agg["rho"]["mean"]), th), "D2": check_d2(_num(agg["g_L"]["mean"]), th),
              "D3": check_d3(_num(agg["gap_pp"]["mean"]), th)}
    for k, c in checks.items():
        key = {"D1": "rho", "D2": "g_L", "D3": "gap_pp"}[k]
        c["std"], c["n"] = agg[key]["std"], agg[key]["n"]
        c["flagged_seeds"] = sum(s[k] == "FLAG" for s in per_seed_checks)
        if not pairs:  # nothing finished: no value to check
            c.update(value=None, margin=None, status="DIVERGED")
    if pairs and all(t.get("status") == "stopped_flagged" and t["final"].get("test_acc") is None for t in trained):
        # every trained run stopped before its first epoch (--stop-on-flag, D1 or D2 at init): no accuracy, so
        # no gap — D3 not measured, never a NaN FLAG (walk 38 W1); D1/D2 say why it stopped
        checks["D3"].update(value=None, margin=None, std=None, n=0, flagged_seeds=0, status="NOT MEASURED",
                            why="stopped before training")
    # trajectories (seed-mean at each measured epoch) for the figures
    trajs = [_trajectory(r) for r in trained]
    epochs = sorted(set.intersection(*(set(e for e, _ in t) for t in trajs))) if trajs else []
    points = [[dict(t)[e] for t in trajs] for e in epochs]
    out = {
        "method": method,
        "n_seeds": len(statuses),
        "status": statuses,
        "diverged": diverged,
        "epochs_completed": [r["final"].get("epochs_completed") for r in trained],
        "standard_pair": {"test_acc": mean_std(acc_t)},
        "monitor": _monitor_summary(everyone),  # when each check fired: diverged runs included (it is why)
        "checks": checks,
        "flags": [k for k, c in checks.items() if c["status"] == "FLAG"] if pairs else ["diverged"],
        "trained_test_acc": mean_std(acc_t),
        "frozen_test_acc": mean_std(acc_f),
        "history": {"epochs": epochs},
        "runs": {"trained": [run_slug_of(r) for r in trained], "frozen": [run_slug_of(r) for r in frozen]},
    }
    # each quantity's own summary and history (diagnostics/*.py); the package's own first, so a plug-in's part
    # that would replace one of theirs is the plug-in's fault, whatever its order (walk 34 W1)
    for d in sorted(registered(), key=lambda d: not d.__module__.startswith("depthaudit.")):
        if any(d.name not in (f or {}) for f in finals):  # a run stored before this quantity existed (a plug-in's
            try:  # added later): its method has no summary of it, unless the quantity summarises without it
                part, traj = d.summarise(finals, L), d.trajectory(points, L)
            except (KeyError, TypeError, IndexError, ValueError):
                continue
        else:
            part, traj = d.summarise(finals, L), d.trajectory(points, L)
        theirs = set() if d.__module__.startswith("depthaudit.") else (  # a plug-in's part under another
            RESERVED_NAMES | {o.name for o in registered() if o is not d})  # quantity's name (cka_to_bp is set
        for where, into, got in (("summarise", out, part), ("trajectory", out["history"], traj)):  # after these)
            key = _clash(into, got)
            if key is None and where == "summarise":
                key = next((k for k in got if k in theirs), None)
            if key is not None:  # (a plug-in's "trained_test_acc" or "checks" replaced the
                raise UsageError(  # audit's own: a report with another number under the protocol's name)
                    f"diagnostic {d.name!r} ({d.__module__}.{d.__qualname__}): its {where}() returned {key!r}, "
                    f"a key the audit's summary{' history' if where == 'trajectory' else ''} holds (its own or another "
                    f"quantity's); key "
                    f"its part by its own name ({d.name!r}) and rerun (an audit reuses its stored runs)")
        _merge(out, part)
        out["history"].update(traj)
    return out


def _clash(into: dict, part: dict, at: str = "") -> str | None:
    """The dotted key where merging ``part`` into ``into`` would replace a value ``into`` already holds."""
    for k, v in part.items():
        if k in into:
            if not (isinstance(v, dict) and isinstance(into[k], dict)):
                return at + str(k)
            if (deeper := _clash(into[k], v, f"{at}{k}.")) is not None:
                return deeper
    return None


def _merge(into: dict, part: dict) -> None:
    """Merge a diagnostic's summary into a method's (nested dicts key by key)."""
    for k, v in part.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = v


def identity_summary(per_seed: list[dict], num_blocks: int) -> dict:
    """Mean ± std over seeds of every identity-check quantity."""
    out = {"block_ratio": [mean_std([p["block_ratio"][i] for p in per_seed]) for i in range(num_blocks)],
           "stack_rel_change": mean_std([p["stack_rel_change"] for p in per_seed]),
           "stack_cos": mean_std([p["stack_cos"] for p in per_seed]),
           "stream_median_norm": [mean_std([p["stream_median_norm"][i] for p in per_seed])
                                  for i in range(num_blocks + 1)],
           "per_example_stack_rel_change": mean_std([p["per_example"]["stack_rel_change"] for p in per_seed]),
           "per_example_stack_cos": mean_std([p["per_example"]["stack_cos"] for p in per_seed])}
    if all("g_L_median" in p for p in per_seed):
        out["g_L_median"] = mean_std([p["g_L_median"] for p in per_seed])
    return out


def run_slug_of(rec: dict) -> str:
    """The folder name a stored run lives under."""
    return rec.get("stored_as") or run_slug(TrainConfig.from_dict(rec["config"]), rec.get("tracking"))


def audit_specs(acfg: AuditConfig, data: DataBundle | None = None, runs_dir: Path | None = None) -> list[RunSpec]:
    """Per method and seed: the tracked full run (with the monitor) and its frozen-blocks baseline.

    With ``runs_dir`` (the audit's run store) each trained run also saves ``checkpoint.pt`` in its folder there
    (read after training for the linear CKA to the BP twin, diagnostics/cka.py).

    With ``acfg.shallow_blocks`` (and ``data``, whose shape sets the parameter count) also the
    parameter-matched shallow baseline (experiments/shallow.py), untracked.
    """
    specs = []
    match = None
    if acfg.shallow_blocks and data is not None:
        match = matched_shallow(acfg.base, data.input_shape, data.num_classes, acfg.shallow_blocks)
    for m in acfg.methods:
        for s in acfg.seeds:
            for kind, blocks, every in (("trained", "all", acfg.track_every), ("frozen", "none", 0)):
                cfg = replace(parse_method_spec(m, acfg.base)[1], seed=s, train_blocks=blocks)
                func = None
                if acfg.functional and kind == "trained":
                    func = {"every": 0, "directions": 32, "step": 1e-3, "eta": 0.01, "seed": s,
                            "fresh_b_draws": acfg.fresh_b_draws}
                tracking = tracking_plan(acfg.probe_batches, acfg.probe_batch_size, every, acfg.thresholds,
                                         acfg.d1_stat, acfg.stop_on_flag and kind == "trained", func)
                ckpt = None if runs_dir is None or kind != "trained" else \
                    str(Path(runs_dir) / run_slug(cfg, tracking) / "checkpoint.pt")
                specs.append(RunSpec(f"{m}/{kind}/s{s}", cfg, tracking, checkpoint=ckpt))
            if match is not None:
                cfg = shallow_config(replace(parse_method_spec(m, acfg.base)[1], seed=s), match)
                specs.append(RunSpec(f"{m}/shallow/s{s}", cfg, None))
    return specs


def run_audit(acfg: AuditConfig, data: DataBundle, out: Path, log=print, argv=None, jobs: int = 1,
              batch_runs: int = 1, opts=None) -> dict | SweepStatus:
    """Train (or reuse) every trained/frozen pair through the sweep runner, measure, return the report dict.

    ``batch_runs > 1``: a method's pairs (and seeds) train stacked, that many runs at most (batched.py). A sweep
    that stopped short (``--list-cells``, ``--cell``) is returned as its :class:`~depthaudit.sweep.SweepStatus`.
    """
    specs = audit_specs(acfg, data, Path(out) / "runs")
    status = run_sweep(specs, FolderStore(Path(out) / "runs", data.sha256), data=data, jobs=jobs, log=log, argv=argv,
                       run_log=lambda m: log("    " + m), batch_runs=batch_runs, opts=opts)
    if not status.complete:
        return status
    recs = status.records
    th = acfg.thresholds
    methods = [summarise_method(m, [recs[f"{m}/trained/s{s}"] for s in acfg.seeds],
                                [recs[f"{m}/frozen/s{s}"] for s in acfg.seeds], th) for m in acfg.methods]
    # each method's stream vs its BP twin's, from the stored checkpoints
    ckas = cka_to_bp(recs, acfg.methods, acfg.seeds, data, Path(out) / "runs", acfg.probe_batches,
                     acfg.probe_batch_size)
    for summary in methods:
        if summary["method"] in ckas:
            summary["cka_to_bp"] = ckas[summary["method"]]
    if acfg.shallow_blocks:
        match = matched_shallow(acfg.base, data.input_shape, data.num_classes, acfg.shallow_blocks)
        for summary, m in zip(methods, acfg.methods, strict=True):
            runs = [recs[f"{m}/shallow/s{s}"] for s in acfg.seeds]
            ok = [r for r in runs if r["status"] != "diverged"]
            acc = mean_std([r["final"]["test_acc"] for r in ok])
            full = summary["trained_test_acc"]["mean"]
            summary["shallow"] = {**match, "test_acc": acc, "diverged": len(runs) - len(ok),
                                  "gap_pp": round(100 * (full - acc["mean"]), 2)
                                  if full is not None and acc["mean"] is not None else None,
                                  "runs": [run_slug_of(r) for r in runs]}
    b = acfg.base
    # the seeds in ascending order: the same seeds in another order are the same audit, its identity section too
    # (walk 42 case 119: the first seed given drew the probe examples; the defaults are ascending, as before)
    x0, y0 = probe_batch(data, min(acfg.seeds), acfg.probe_batches * acfg.probe_batch_size)
    ident = identity_over_seeds(b, data.input_shape, data.num_classes, sorted(acfg.seeds), x0, y0,
                                acfg.probe_batch_size)
    ident["summary"] = identity_summary(ident["per_seed"], b.num_blocks)
    return {"schema": SCHEMA, "config": acfg.to_dict(), "thresholds": th.to_dict(),
            "provenance": provenance(torch.device(b.device), data.provenance(), acfg.seeds[0], argv,
                                     uses={"method": [m.name for m in acfg.methods], "arch": b.arch,
                                           "dataset": b.dataset, "diagnostics": True}),
            "definitions": definitions(acfg), "methods": methods, "identity": ident,
            "decision": decision_table(methods, 1.0 / data.num_classes, th)}


def cka_to_bp(records: dict, methods, seeds, data, runs_dir, probe_batches, probe_batch_size) -> dict:
    """``{method: [mean ± std per layer]}`` from the stored trained runs against BP's of the same seed.

    ``records`` are the audit's run records by ``"<method>/trained/s<seed>"``; each run's ``checkpoint.pt`` sits in
    ``runs_dir/<its folder>``. Empty when the audit has no ``bp`` or BP's checkpoint is missing; a method whose
    checkpoint is missing (for any seed) has none, the others keep theirs (nothing is guessed); a diverged run
    (either twin) adds no seed.
    """
    if "bp" not in methods:
        return {}
    swapped = []  # every checkpoint that is not its record's, named at once (walk 24 case 137: one per rerun)
    for key in (f"{m}/trained/s{s}" for s in seeds for m in dict.fromkeys(["bp", *methods])):
        rec = records.get(key)
        path = runs_dir / run_slug_of(rec) / "checkpoint.pt" if rec else None
        if rec and rec["status"] != "diverged" and path.is_file() and checkpoint_problem(path, rec):
            swapped.append(path)
    if len(swapped) > 1:
        raise UsageError(f"{len(swapped)} checkpoints are not the ones their run records were written with (or cannot "
                         f"be read): {', '.join(map(str, swapped))}; the CKA to BP reads them: move their folders away "
                         "and rerun the audit to train those runs again (the others are reused)")

    def load(rec):
        if rec["status"] == "diverged":  # a diverged run's weights are not finite: no CKA (the card says diverged),
            return False  # and none is looked for (its checkpoint, if any, is not needed for the others')
        path = runs_dir / run_slug_of(rec) / "checkpoint.pt"
        if path.exists() and not path.is_file():  # a folder or FIFO in its place: named, never skipped silently
            raise UsageError(f"{path} is not a file; the CKA to BP reads it: move {path.parent} away and rerun the "
                             "audit to train that run again (the others are reused)")
        if not path.is_file():
            who = "no method has" if rec["config"]["method"] == "bp" else f"{rec['config']['method']} has no"
            print(f"depthaudit: note: {path} is missing, so {who} CKA to BP in the report (rerun the audit after "
                  f"moving {path.parent} away to train that run again with its checkpoint)", file=sys.stderr)
            return None
        cfg = TrainConfig.from_dict({**rec["config"], "device": str(data.x_test.device), "warm_start": None})
        model, method = build(cfg, data)
        bad = checkpoint_problem(path, rec)
        try:
            state = None if bad else torch.load(path, map_location="cpu", weights_only=True)["model"]
        except Exception as exc:  # truncated, not a checkpoint (EOFError, UnpicklingError, KeyError…)
            bad = f"cannot be read ({type(exc).__name__}: {str(exc)[:80]})"
        if bad:
            raise UsageError(f"{path} {bad}; the CKA to BP reads it: move {path.parent} away and rerun the audit to "
                             "train that run again (the others are reused)")
        try:
            model.load_state_dict(state)
        except RuntimeError as exc:  # (walk 30 W6: the arch now registered by another module builds another model)
            first = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else type(exc).__name__
            raise UsageError(f"{path} does not fit the model --arch {cfg.arch} builds here ({first} …): the code "
                             "that registers that architecture changed since this run was trained; load the plug-in "
                             "that trained it, or write to a new --out") from None
        return model.eval(), method

    out, missing = {}, set()  # a method with a missing checkpoint has no CKA (no seed averaged without it); the
    for s in seeds:  # others keep theirs (a folder whose early runs lost their checkpoints: its later ones measured)
        bp = load(records[f"bp/trained/s{s}"])
        if bp is None:
            return {}
        batches = draw_probes(data, s, probe_batches, probe_batch_size)
        for m in methods if bp else []:
            got = None if m in missing else load(records[f"{m}/trained/s{s}"])
            if got is None:
                missing.add(m)
            elif got:
                out.setdefault(m, []).append(Tracker(batches, [CKAToBP(reference=bp[0])])(0, *got, final=True))
    return {m: CKAToBP.summarise(v, len(v[0][CKAToBP.name]["per_layer"]) - 1)[CKAToBP.name] for m, v in out.items()
            if m not in missing}


DEFINITIONS = {
    "reference": "g_l = d(mean loss over a probe batch of B_p)/d h_l (the field's convention; B_p = 128 default)",
    "cosine": "standard (the field's): per example F.cosine_similarity(c_l,b, g_l,b, eps=1e-8) in fp32, both in the "
              "mean-loss convention, averaged over all probe examples (10 held-out batches of 128 by default)",
    "aggregate_cosine_mean_per_layer": "the headline: mean over l=0..L of the standard per-layer cosines",
    "robust_cosine": "ours: fp64 cosine of the whole probe-set tensors, no floor; concat = all layers concatenated",
    "update_cosine": "ours: robust cos(grad_theta <f_l, c_l>, grad_theta <f_l, g_l>) for block l's parameters",
    "rho": "D1: max_l |h_l| / |h_{l-1}|, |h| = median over probe examples of the per-example L2 norm "
           "(ViT ref: the cls token h[:, 0])",
    "g_L": "D2: median over probe examples of the per-example norm of g_L (mean-loss, batch B_p): what eps sees",
    "gap_pp": "100 * (test_acc trained - test_acc of the frozen-blocks baseline, same method and recipe) (D3)",
    "margin": "signed distance to the threshold, positive on the passing side: decades for D1/D2, pp for D3",
    "decision": "ours: the standard pair walks a method back when its accuracy is within the D3 margin (2 pp) of "
                "chance or its aggregate Γ ≤ 0; the protocol walks it back when any of D1/D2/D3 is flagged",
    "monitor": "the first epoch at which D1 / D2 fired during training; compute saved = 1 - epoch / budget",
}


def definitions(acfg: AuditConfig) -> dict:
    """:data:`DEFINITIONS` as this audit measured them: its cosine floor ε and its D1 statistic.

    (Walk 26 cases 133, 134: a mean-statistic or ε = 1e-6 audit's report described the defaults.)
    """
    d = dict(DEFINITIONS)
    d["cosine"] = d["cosine"].replace("eps=1e-8", f"eps={acfg.thresholds.eps:g}")
    if acfg.d1_stat != "median":
        d["rho"] = d["rho"].replace("= median over probe examples", f"= {acfg.d1_stat} over probe examples")
    return d


# counted over every seed, diverged ones too (the records a report names are only the finished pairs): not compared
_OVER_EVERY_SEED = ("status", "diverged", "n_seeds", "epochs_completed", "monitor")


def _same(a, b) -> bool:
    """Equal as JSON values, floats to 1e-9 relative (a report's numbers are the records' arithmetic)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    gone = [x is None or (isinstance(x, float) and not math.isfinite(x)) for x in (a, b)]
    if all(gone):  # a non-finite number is stored as null (strict JSON): the same value (walk 37 W4: a run stopped
        return True  # at init has a NaN D3 gap, its stored report null, and report called it an edit)
    numbers = (isinstance(x, int | float) and not isinstance(x, bool) for x in (a, b))
    if all(numbers):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def report_mismatch(report: dict, runs_root: Path) -> str | None:
    """Where an audit report's numbers and verdicts differ from its run records (a hand edit); None when they agree.

    Each method's summary is computed again from the records its ``runs`` name (``runs_root/<slug>/result.json``),
    and the decision table from those summaries; a report whose records are not all at hand is not checked.
    """
    th = Thresholds(**report["thresholds"])
    again = []
    for m in report["methods"]:
        recs = {}
        for kind in ("trained", "frozen"):
            recs[kind] = [read_record(Path(runs_root) / slug / "result.json")[0] for slug in m["runs"][kind]]
        if any(r is None for rs in recs.values() for r in rs):
            return None  # records moved away: nothing to check against (check_folder_records names damaged ones)
        if not recs["trained"]:  # every seed diverged: nothing derived from a record
            again.append(m)
            continue
        fresh = summarise_method(m["method"], [unsealed(r) for r in recs["trained"]],
                                 [unsealed(r) for r in recs["frozen"]], th)
        for k, v in fresh.items():  # (a key an earlier version did not write is not compared)
            if k != "runs" and k not in _OVER_EVERY_SEED and k in m and not _same(v, m[k]):
                return f"method {m['method']}'s {k!r} is not what its run records give"
        again.append({**m, **{k: v for k, v in fresh.items() if k != "runs"}})
    if "decision" not in report:  # (an earlier version's report: no decision table to check)
        return None
    chance = ((report.get("provenance") or {}).get("data") or {}).get("num_classes")
    chance = 1.0 / chance if isinstance(chance, int) and chance > 0 else report["decision"]["chance_acc"]
    if not _same(decision_table(again, chance, th), report["decision"]):
        return "its decision table is not what its methods' run records give"
    return None
