"""One run's record: the ``result.json`` content, its folder name, saving, and the audit's probe batch."""

import hashlib
import json
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import torch

from .batched import graphed, train_stacked
from .config import TrainConfig
from .data import DataBundle, load_data
from .data.base import sha256_file
from .diagnostics import audit_monitor, audit_tracker
from .diagnostics.base import INIT_MEASUREMENT_KEY
from .errors import UsageError
from .io import environment_error, finite_json, save_torch, unlink_run_link, write_bytes_atomic, write_json
from .loop import RunOutput, train
from .provenance import provenance
from .seeds import derive_seed

SCHEMA = "depthaudit.train.v1"


def result_record(cfg: TrainConfig, data: DataBundle, run: RunOutput, argv: list[str] | None,
                  tracking: dict | None = None) -> dict:
    """The ``result.json`` content of one run (config, provenance, history, final, status)."""
    rec = {"schema": SCHEMA, "status": run.status, "config": cfg.to_dict(),
           "provenance": provenance(torch.device(cfg.device), data.provenance(), cfg.seed, argv,
                                    datetime.now(timezone.utc) - timedelta(seconds=run.seconds),
                                    uses={"method": [cfg.method, *([cfg.warmup.partition(":")[0]] if cfg.warmup
                                                                   else [])],
                                          "arch": cfg.arch, "dataset": cfg.dataset, "diagnostics": bool(tracking)}),
           "tracking": tracking, "history": run.history, "final": run.final, "monitor": run.monitor,
           "timing": {"train_seconds": round(run.seconds, 3)}}
    if run.init_measurement is not None:
        rec[INIT_MEASUREMENT_KEY] = run.init_measurement
    return finite_json(rec)


def save_run(out: Path, rec: dict, run: RunOutput, checkpoint: bool = True) -> None:
    """Write ``checkpoint.pt`` (weights + method feedback) then ``result.json``, each atomically.

    A checkpoint that cannot be written (a full disk) does not lose the run: ``result.json`` is still written,
    then the failure is one line saying so.
    """
    failed, stale, wrote = None, None, False
    ck = out / "checkpoint.pt"
    json.dumps(finite_json(rec), allow_nan=False)  # a record JSON cannot hold fails here, before any file is written
    try:  # the previous run's checkpoint (a --force over it), put back if this run's record cannot be written
        old_ck = ck.read_bytes() if ck.is_file() else None
    except OSError:
        old_ck = None
    if checkpoint:
        try:
            save_torch(ck, {"config": rec["config"], "model": run.model.state_dict(),
                            "method": run.method.state_dict(), "status": run.status})
            wrote = True
            rec = {**rec, "checkpoint_sha256": sha256_file(ck)}  # sealed with the record (a warm start checks it)
        except OSError as exc:
            failed = exc
    if (failed is not None or not checkpoint) and ck.is_file():  # another run's weights (a --force over it): never
        try:  # left beside this one
            ck.unlink()
        except OSError as exc:  # (walk 14 case 100: an immutable file stayed, and was called missing)
            stale = exc
    if stale is not None:  # this record must not be paired with the previous run's weights: the old pair is kept
        raise UsageError(f"{ck} is the previous run's and cannot be replaced or removed ("
                         f"{stale.strerror or stale}); this run is not written, the "
                         f"folder still holds the previous run: free {ck} (its permissions, chattr -i) or use "
                         "another --out, then rerun") from None
    try:
        write_json(out / "result.json", rec)
    except BaseException:  # (walk 15 case 243: an unreplaceable result.json left the new weights beside the old
        if wrote:  # record): the previous pair is put back, so "nothing half-written" holds
            try:
                write_bytes_atomic(ck, old_ck) if old_ck is not None else ck.unlink()
            except OSError:
                pass
        raise
    if failed is not None:
        raise UsageError(f"{environment_error(failed) or failed}; the run is kept in {out / 'result.json'}, without "
                         "its checkpoint (rerun with --force to write both)") from None


def run_slug(cfg: TrainConfig, tracking: dict | None = None) -> str:
    """A readable, unique folder name for a config (+ a hash of everything, tracking included)."""
    blob = json.dumps([cfg.identity_dict(), tracking], sort_keys=True).encode()
    tb = cfg.train_blocks.replace(":", "")
    stop = f"to{cfg.stop_after}" if cfg.stop_after is not None else ""
    return (f"{cfg.dataset}_{cfg.arch}_d{cfg.d_hidden}_L{cfg.num_blocks}_{cfg.method}_{tb}_e{cfg.epochs}{stop}"
            f"_s{cfg.seed}_{hashlib.sha256(blob).hexdigest()[:8]}")


def probe_batch(data: DataBundle, seed: int, size: int):
    """A fixed probe set of ``size`` held-out examples, drawn with a seed derived from the run's seed."""
    n = data.x_test.shape[0]
    gen = torch.Generator().manual_seed(derive_seed(seed, "probe"))
    idx = torch.randperm(n, generator=gen)[:min(size, n)].to(data.x_test.device)
    return data.x_test[idx], data.y_test[idx]


def probe_batches(data: DataBundle, seed: int, n_batches: int = 10, batch_size: int = 128) -> list:
    """``n_batches`` fixed held-out probe batches of ``batch_size`` (SPEC §3: the reference uses 10 × 128).

    Drawn without replacement from the test split with a seed derived from the run's seed; when the split
    is smaller than ``n_batches × batch_size`` there are fewer batches (at least one), all of equal size.
    """
    n_test = data.x_test.shape[0]
    if batch_size > n_test:
        raise UsageError(f"--probe-batch-size {batch_size} exceeds the {n_test} held-out examples; use a smaller one")
    k = max(1, min(n_batches, n_test // batch_size))
    x, y = probe_batch(data, seed, k * batch_size)
    return [(x[i * batch_size:(i + 1) * batch_size], y[i * batch_size:(i + 1) * batch_size]) for i in range(k)]


def fitted_probe_batches(data: DataBundle, n_batches: int, batch_size: int, log=None) -> int:
    """How many probe batches of ``batch_size`` the held-out split holds, at most ``n_batches``.

    This is what :func:`probe_batches` measures on; the commands record and print this number, never one
    the split cannot hold (with a note when it is fewer than asked for).
    """
    n_test = data.x_test.shape[0]
    k = max(1, min(n_batches, n_test // max(1, batch_size)))
    if k < n_batches:
        (log or (lambda m: print(m, file=sys.stderr, flush=True)))(
            f"depthaudit: note: --probe-batches {n_batches} × --probe-batch-size {batch_size} exceeds the {n_test} "
            f"held-out examples; measuring (and recording) {k} batches of {batch_size}")
    return k


def tracking_plan(n_batches: int, batch_size: int, every: int, thresholds, d1_stat: str = "median",
                  stop_on_flag: bool = False, functional: dict | None = None) -> dict:
    """The measurement plan stored with (and hashed into) a run: probe batches, schedule, ε, D1 statistic, monitor.

    ``functional`` (opt-in) is only present when asked for, so plans without it keep matching stored runs.
    """
    plan = {"probe_batches": n_batches, "probe_batch_size": batch_size, "every": every, "eps": thresholds.eps,
            "d1_stat": d1_stat, "monitor": {"rho_max": thresholds.rho_max, "ref_factor": thresholds.ref_factor,
                                            "stop_on_flag": stop_on_flag} if every > 0 else None}
    if functional:
        plan["functional"] = functional
    return plan


def run_recipe(spec, data: DataBundle | None = None, log=None, argv=None, watch=None) -> dict:
    """The default runner of a sweep spec: train ``spec.cfg`` under the recipe, measured as ``spec.tracking`` says.

    Loads the data when not given (a worker process), saves a checkpoint when the spec asks for one.
    """
    cfg = spec.cfg
    if data is None:
        data = load_data(cfg.dataset, cfg.data_dir, False, torch.device(cfg.device), fingerprint=False)
    tracker, monitor = _measurement(spec, data)
    run = train(cfg, data, log=log or (lambda m: None), tracker=tracker, monitor=monitor, watch=watch)
    if watch is not None:
        watch.close(run.status, run.final)
    return _finish(spec, data, run, argv)


def run_recipe_stacked(specs: list, data: DataBundle | None = None, log=None, argv=None,
                       watches=None, graphs: bool = False) -> list[dict]:
    """Several recipe specs that share an architecture (:func:`depthaudit.batched.group_key`), trained stacked.

    Each record is what :func:`run_recipe` writes for that spec alone, plus ``timing.stacked_runs`` (and
    ``timing.cuda_graphs`` when the step was replayed as a CUDA graph, ``graphs``).
    """
    cfg = specs[0].cfg
    if data is None:
        data = load_data(cfg.dataset, cfg.data_dir, False, torch.device(cfg.device), fingerprint=False)
    measured = [_measurement(s, data) for s in specs]
    runs = train_stacked([s.cfg for s in specs], data, log=log or (lambda m: None),
                         trackers=[m[0] for m in measured], monitors=[m[1] for m in measured], watches=watches,
                         graphs=graphs)
    for w, run in zip(watches or [], runs, strict=False):
        if w is not None:
            w.close(run.status, run.final)
    recs = [_finish(s, data, run, argv) for s, run in zip(specs, runs, strict=True)]

    was_graphed = graphed(graphs, cfg.device, cfg.method)
    for rec in recs:
        rec["timing"]["stacked_runs"] = len(specs)
        if was_graphed:
            rec["timing"]["cuda_graphs"] = True
    return recs


def _measurement(spec, data: DataBundle):
    """The spec's tracker and monitor (None, None without a tracking plan)."""
    if not spec.tracking:
        return None, None
    t, cfg = spec.tracking, spec.cfg
    batches = probe_batches(data, cfg.seed, t["probe_batches"], t["probe_batch_size"])
    return (audit_tracker(batches, t["every"], t["eps"], t.get("d1_stat", "median"), t.get("functional")),
            audit_monitor(t))


def _finish(spec, data: DataBundle, run: RunOutput, argv) -> dict:
    """The run's record; its checkpoint saved where the spec asks."""
    rec = result_record(spec.cfg, data, run, argv, spec.tracking)
    if spec.checkpoint:
        unlink_run_link(Path(spec.checkpoint).parent)  # (a link to another run's folder: never written through)
        save_torch(Path(spec.checkpoint), {"config": rec["config"], "model": run.model.state_dict(),
                                           "method": run.method.state_dict(), "status": run.status})
        rec["checkpoint_sha256"] = sha256_file(Path(spec.checkpoint))  # sealed with the record: a swapped or
    return rec  # damaged checkpoint shows before its weights are read (CKA to BP, a warm start)


def checkpoint_problem(path: Path, rec: dict) -> str | None:
    """Why ``path`` is not the checkpoint ``rec`` was written with (digest, unreadable); None when it is."""
    want = rec.get("checkpoint_sha256")
    if want is None:  # a record older than the digest: nothing to compare
        return None
    try:
        got = sha256_file(Path(path))
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    return None if got == want else "is not the checkpoint its run record was written with (its sha256 differs)"
