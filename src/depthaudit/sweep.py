"""The one sweep mechanism: a list of run specs, a store that remembers finished runs, N worker processes.

Every experiment (audit pairs, depth ladder, later sweeps) trains through :func:`run_sweep`. A finished
run is stored the moment it ends (atomic replace), so an interrupted sweep resumes and loses at most
the runs in flight; runs already in the store are skipped and reported as such.
"""

import glob
import json
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import torch

from .config import TrainConfig
from .errors import UsageError
from .io import write_json
from .runner import run_slug


@dataclass(frozen=True)
class RunSpec:
    """One training run of a sweep: its config, its measurement plan and its key in the store."""

    key: str
    cfg: TrainConfig  # or any frozen config with to_dict() and same_as(stored_dict) (other runners)
    tracking: dict | None = None  # runner.tracking_plan(...): audit diagnostics on probe batches, monitor
    checkpoint: str | None = None  # also save weights + feedback here (e.g. a State Bridge's start)
    runner: Callable | None = None  # runner(spec, data, log, argv) -> record; None = the training recipe


class FolderStore:
    """One folder per run, ``root/<slug>/result.json`` (the audit's layout); reuse needs an identical config."""

    def __init__(self, root: Path, data_sha256: str | None = None):
        self.root = Path(root)
        self.data_sha256 = data_sha256  # when given, a stored run is reused only if it saw the same data

    def path(self, spec: RunSpec) -> Path:
        """Where ``spec``'s result lives."""
        return self.root / run_slug(spec.cfg, spec.tracking) / "result.json"

    def get(self, spec: RunSpec) -> dict | None:
        """The stored record if it is a finished run of exactly this config and tracking.

        The slug's hash covers every config field, so a run stored by a version with fewer fields sits
        under another hash: siblings with the same readable prefix are checked too (``same_as`` reads a
        missing field as what that version ran with), so a newer version reuses what still matches.
        """
        path = self.path(spec)
        prefix = path.parent.name.rsplit("_", 1)[0] + "_"
        siblings = sorted(self.root.glob(f"{glob.escape(prefix)}*/result.json")) if self.root.is_dir() else []
        for p in [path, *(s for s in siblings if s != path and s.parent.name.rsplit("_", 1)[0] + "_" == prefix)]:
            try:
                rec = json.loads(p.read_text())
            except (OSError, json.JSONDecodeError):
                continue
            if not isinstance(rec, dict) or not isinstance(rec.get("final"), dict) \
                    or not isinstance(rec.get("history", []), list):
                continue  # damaged or foreign: the run is trained again
            seen = ((rec.get("provenance") or {}).get("data") or {}).get("sha256")
            if self.data_sha256 is not None and seen != self.data_sha256:
                continue
            if spec.cfg.same_as(rec.get("config") or {}) and rec.get("tracking") == spec.tracking:
                return rec if p == path else {**rec, "stored_as": p.parent.name}
        return None

    def put(self, spec: RunSpec, rec: dict) -> None:
        """Store a finished run."""
        write_json(self.path(spec), rec)

    def __str__(self) -> str:
        return str(self.root)


class FileStore:
    """All runs of one configuration in one JSON file, rewritten atomically after every finished run.

    ``identity`` describes what every run in the file shares (e.g. the base config and the data hash);
    a file holding a different identity is refused, never mixed.
    """

    def __init__(self, path: Path, schema: str, identity: dict, meta: dict | None = None,
                 defaults: dict | None = None):
        self.path, self.schema, self.identity = Path(path), schema, identity
        defaults = defaults or {}
        self.doc = {"schema": schema, "identity": identity, **(meta or {}), "runs": {}}
        if self.path.exists():
            try:
                old = json.loads(self.path.read_text())
            except json.JSONDecodeError as exc:
                raise UsageError(f"{self.path} is not valid JSON ({exc}); move it away to start afresh") from None
            old_id = old.get("identity") or {}
            # a field missing on one side (written by another version) counts as its default
            diff = sorted(k for k in set(identity) | set(old_id)
                          if old_id.get(k, defaults.get(k)) != identity.get(k, defaults.get(k)))
            if old.get("schema") != schema or diff:
                raise UsageError(f"{self.path} holds runs of a different configuration (differs in: "
                                 f"{', '.join(diff) or 'schema'}); use another output folder or move the file")
            self.doc["runs"] = old.get("runs", {})

    def get(self, spec: RunSpec) -> dict | None:
        """The stored record for ``spec.key`` if its config and tracking match."""
        rec = self.doc["runs"].get(spec.key)
        if rec and spec.cfg.same_as(rec.get("config") or {}) and rec.get("tracking") == spec.tracking:
            return rec
        return None

    def put(self, spec: RunSpec, rec: dict) -> None:
        """Add a finished run and rewrite the file atomically."""
        self.doc["runs"][spec.key] = rec
        write_json(self.path, self.doc)

    def __str__(self) -> str:
        return str(self.path)


class Progress:
    """One line per finished run: a bar across runs, elapsed time and an ETA from this session's pace."""

    def __init__(self, total: int, skipped: int, log):
        self.total, self.done, self.new, self.log, self.t0 = total, skipped, 0, log, time.perf_counter()

    def update(self, label: str) -> None:
        """Count one finished run and print the bar."""
        self.done += 1
        self.new += 1
        el = time.perf_counter() - self.t0
        eta = el / self.new * (self.total - self.done)
        bar = "#" * round(20 * self.done / self.total)
        self.log(f"[{bar:<20}] {self.done}/{self.total} runs  elapsed {_hms(el)}  ETA {_hms(eta)}  | {label}")


def _hms(s: float) -> str:
    s = int(s)
    return f"{s // 3600}h{s // 60 % 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def execute(spec: RunSpec, data=None, log=None, argv=None) -> dict:
    """Run one spec and return its result record: the spec's own runner, else the training recipe's."""
    from .runner import run_recipe

    return (spec.runner or run_recipe)(spec, data, log, argv)


def execute_group(specs: list[RunSpec], data=None, log=None, argv=None) -> list[dict]:
    """Run a group of specs: one alone as :func:`execute`, several stacked in one process (batched.py)."""
    from .runner import run_recipe_stacked

    if len(specs) == 1:
        return [execute(specs[0], data, log, argv)]
    return run_recipe_stacked(specs, data, log, argv)


def stack_groups(specs: list[RunSpec], cap: int) -> list[list[RunSpec]]:
    """Specs in groups of at most ``cap`` that can train stacked; every other spec alone, order kept.

    Specs stack when they run the recipe (no own runner) with configs that differ only in seed and
    trainable blocks (each keeps its own tracking plan) under a stackable method and model (:func:`batched.group_key`);
    runs that may stop early on a flag (``--stop-on-flag``) train alone.
    """
    from .batched import group_key

    if cap <= 1:
        return [[s] for s in specs]
    groups: list[list[RunSpec]] = []
    open_: dict[str, list[RunSpec]] = {}
    for s in specs:
        mon = (s.tracking or {}).get("monitor") or {}
        key = group_key(s.cfg) if s.runner is None and isinstance(s.cfg, TrainConfig) \
            and not mon.get("stop_on_flag") else None
        if key is None:
            groups.append([s])
            continue
        g = open_.get(key)
        if g is None or len(g) >= cap:
            g = open_[key] = []
            groups.append(g)
        g.append(s)
    return groups


def batch_cap(batch_runs: int | None, device: str) -> int:
    """``--batch-runs``: a number as given; ``None`` (auto) = 16 on a CUDA device, 1 on the CPU.

    On the CPU stacking measured no gain (benchmarks/bench_batched.py: 0.98×), so runs go one by one.
    """
    if batch_runs is not None:
        return batch_runs
    return 16 if str(device).startswith("cuda") else 1


def _worker_init(threads: int, parent: int) -> None:
    """A worker: its thread share, dies with its parent (pid ``parent``), imports the parent's plug-ins."""
    torch.set_num_threads(threads)
    _die_with_parent(parent)
    from .plugins import import_plugin

    for name in filter(None, os.environ.get("DEPTHAUDIT_PLUGINS", "").split(",")):
        import_plugin(name)


def _die_with_parent(parent: int) -> None:
    """Never outlive the sweep: the kernel kills us when the parent dies (Linux), else a watchdog thread does."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)

    def watch():
        while True:
            time.sleep(2.0)
            if os.getppid() != parent:
                os._exit(1)

    import threading

    threading.Thread(target=watch, daemon=True).start()


def _summary(rec: dict) -> str:
    acc = rec["final"]["test_acc"]
    return f"{rec['status']}, test_acc {acc:.4f}" if acc is not None else rec["status"]


def run_sweep(specs: list[RunSpec], store, *, data=None, jobs: int = 1, log=None, argv=None,
              run_log=None, batch_runs: int = 1) -> dict[str, dict]:
    """Run every spec not already in ``store``; return ``{key: record}`` for all specs.

    ``jobs > 1`` trains in that many spawned processes (each loads the data from the cache and uses
    ``cpu_count // jobs`` threads); only this process writes the store. ``batch_runs > 1`` trains up to
    that many runs that can share an architecture stacked in one process (:func:`stack_groups`); a
    group's runs are stored together when it ends, so an interrupted sweep loses at most the groups in flight.
    """
    log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    results, pending = {}, []
    for s in specs:
        rec = store.get(s)
        if rec is not None:
            results[s.key] = rec
        else:
            pending.append(s)
    if results:
        log(f"{len(results)} of {len(specs)} runs already finished in {store}; skipping them")
    prog = Progress(len(specs), len(results), log)
    groups = stack_groups(pending, batch_runs)
    if jobs <= 1 or len(groups) <= 1:
        for g in groups:
            c = g[0].cfg
            what = c.describe() + ", " if hasattr(c, "describe") else ""
            stop = f" (first {c.stop_after})" if getattr(c, "stop_after", None) else ""
            if len(g) == 1:
                log(f"run {g[0].key}: {what}seed {c.seed}, {c.epochs} epochs{stop}")
            else:
                log(f"{len(g)} runs stacked ({', '.join(s.key for s in g)}): {c.method}, {c.epochs} epochs{stop}")
            for s, rec in zip(g, execute_group(g, data, log=run_log, argv=argv), strict=True):
                store.put(s, rec)
                results[s.key] = rec
                prog.update(f"{s.key}: {_summary(rec)}")
        return results
    threads = max(1, (os.cpu_count() or 1) // jobs)
    with ProcessPoolExecutor(jobs, mp_context=get_context("spawn"), initializer=_worker_init,
                             initargs=(threads, os.getpid())) as pool:
        futs = {pool.submit(execute_group, g, None, None, argv): g for g in groups}
        for fut in as_completed(futs):
            for s, rec in zip(futs[fut], fut.result(), strict=True):
                store.put(s, rec)
                results[s.key] = rec
                prog.update(f"{s.key}: {_summary(rec)}")
    return results
