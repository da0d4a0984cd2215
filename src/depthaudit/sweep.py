"""The one sweep mechanism: a list of run specs, a store that remembers finished runs, N worker processes.

Every experiment (audit pairs, depth ladder, later sweeps) trains through :func:`run_sweep`. A finished
run is stored the moment it ends (atomic replace), so an interrupted sweep resumes and loses at most
the runs in flight; runs already in the store are skipped and reported as such.
"""

import glob
import json
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote

from .config import TrainConfig
from .errors import SweepDone, UsageError
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
    """All runs of one configuration in one JSON file, assembled from one record file per run.

    Each finished run is written atomically under its own name in ``<file>.runs/`` by whichever process ran
    it (a local worker, a Ray task, a SLURM array task), then the JSON is re-assembled from every record
    there under a file lock and replaced atomically: two sweeps writing one store at once lose nothing, and
    a worker killed mid-run loses only that run. ``identity`` describes what every run in the file shares
    (e.g. the base config and the data hash); a file holding a different identity is refused, never mixed.
    """

    def __init__(self, path: Path, schema: str, identity: dict, meta: dict | None = None,
                 defaults: dict | None = None):
        self.path, self.schema, self.identity = Path(path), schema, identity
        self.runs_dir = self.path.with_suffix(".runs")
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
            for k, v in old.items():  # what another version or command added at the top level stays
                self.doc.setdefault(k, v)
        self.doc["runs"].update(read_run_files(self.runs_dir))

    def _run_path(self, key: str) -> Path:
        return self.runs_dir / (quote(key, safe="") + ".json")

    def get(self, spec: RunSpec) -> dict | None:
        """The stored record for ``spec.key`` if its config and tracking match (a record file counts too)."""
        rec = self.doc["runs"].get(spec.key) or read_run_files(self.runs_dir, [spec.key]).get(spec.key)
        if rec and spec.cfg.same_as(rec.get("config") or {}) and rec.get("tracking") == spec.tracking:
            return rec
        return None

    def put(self, spec: RunSpec, rec: dict) -> None:
        """Write the run's own record file, then re-assemble the JSON from every record (under a lock)."""
        write_json(self._run_path(spec.key), rec)
        self.assemble()

    def assemble(self) -> None:
        """Rewrite the JSON from what is on disk: its runs plus every record file (which win)."""
        with file_lock(self.path.with_suffix(".lock")):
            runs = {}
            if self.path.exists():
                try:
                    runs = json.loads(self.path.read_text()).get("runs", {})
                except json.JSONDecodeError:
                    runs = {}
            runs.update(self.doc["runs"])
            runs.update(read_run_files(self.runs_dir))
            self.doc["runs"] = runs
            write_json(self.path, self.doc)

    def __str__(self) -> str:
        return str(self.path)


def read_run_files(folder: Path, keys: list[str] | None = None) -> dict[str, dict]:
    """``{key: record}`` of the record files in ``folder`` (all, or those of ``keys``); unreadable ones skipped."""
    folder = Path(folder)
    if not folder.is_dir():
        return {}
    paths = sorted(folder.glob("*.json")) if keys is None else [folder / (quote(k, safe="") + ".json") for k in keys]
    out = {}
    for p in paths:
        try:
            rec = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(rec, dict) and isinstance(rec.get("final"), dict):
            out[unquote(p.stem)] = rec
    return out


@contextmanager
def file_lock(path: Path):
    """An exclusive advisory lock on ``path`` (``flock``; where unavailable, none)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        try:
            import fcntl
        except ImportError:  # not POSIX: atomic replaces still keep every file valid
            yield
            return
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


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


def execute_group(specs: list[RunSpec], data=None, log=None, argv=None, opts=None) -> list[dict]:
    """Run a group of specs: one alone as :func:`execute`, several stacked in one process (batched.py).

    With ``opts.log`` each run is mirrored live to TensorBoard/W&B (a spec with its own runner: after it ends).
    """
    from .runlog import make_watch
    from .runner import run_recipe, run_recipe_stacked

    kinds = opts.log if opts is not None else ()
    group = Path(opts.log_dir).parent.name if kinds and opts.log_dir else "depthaudit"
    watches = [make_watch(kinds, opts.log_dir if kinds else None, s.key,
                          s.cfg.to_dict() if hasattr(s.cfg, "to_dict") else {}, group) for s in specs]
    if len(specs) > 1:
        return run_recipe_stacked(specs, data, log, argv, watches=watches)
    spec, watch = specs[0], watches[0]
    if spec.runner is None:
        return [run_recipe(spec, data, log, argv, watch=watch)]
    rec = spec.runner(spec, data, log, argv)
    if watch is not None:  # the depth families' runners: their history, after the run
        for h in rec.get("history") or []:
            watch.epoch(h)
        watch.close(rec.get("status", "ok"), rec.get("final") or {})
    return [rec]


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


@dataclass(frozen=True)
class SweepOptions:
    """How a sweep runs: where (executor), how many at once, which cells, and where runs are watched."""

    jobs: int = 1  # local: parallel worker processes
    batch_runs: int = 1  # runs trained stacked per group (batched.py)
    executor: str = "local"  # local | ray | slurm (executors.py)
    cell: str | None = None  # run exactly this cell (its key or its index in --list-cells)
    list_cells: bool = False  # print the grid and stop
    stored_only: bool = False  # train nothing; refuse if a cell is missing (``depthaudit report`` of cells)
    log: tuple[str, ...] = ()  # "tensorboard", "wandb": per-run live logs (runlog.py)
    log_dir: str | None = None  # where TensorBoard/W&B files go (default: <out>/logs)
    ray_address: str | None = None
    cpus_per_run: float = 1.0
    gpus_per_run: float = 0.0
    slurm_partition: str | None = None
    slurm_time: int = 240  # minutes per array task
    slurm_gpus: int = 0
    slurm_parallelism: int = 64  # array tasks running at once
    slurm_cluster: str | None = None  # submitit's cluster ("local" runs array tasks as local processes: tests)
    slurm_folder: str | None = None  # submitit's logs (default: <out>/slurm)
    remember: tuple | None = None  # (out, argv): write out/sweep.json once --cell is found (commands.args)


def _summary(rec: dict) -> str:
    acc = rec["final"]["test_acc"]
    return f"{rec['status']}, test_acc {acc:.4f}" if acc is not None else rec["status"]


def cell_lines(specs: list[RunSpec], store) -> list[str]:
    """One line per cell: index, stable id (the run's key), done/pending, what it trains."""
    out = []
    for i, s in enumerate(specs):
        c = s.cfg
        what = c.describe() if hasattr(c, "describe") else ""
        out.append(f"{i}\t{s.key}\t{'done' if store.get(s) is not None else 'pending'}\t{what}")
    return out


def pick_cell(specs: list[RunSpec], cell: str) -> RunSpec:
    """The spec a ``--cell`` names: its key, or its index (e.g. ``$SLURM_ARRAY_TASK_ID``)."""
    for s in specs:
        if s.key == cell:
            return s
    if cell.lstrip("-").isdigit() and 0 <= int(cell) < len(specs):
        return specs[int(cell)]
    raise UsageError(f"--cell {cell}: no such cell (ids and indices 0..{len(specs) - 1}: see --list-cells)")


def run_sweep(specs: list[RunSpec], store, *, data=None, jobs: int = 1, log=None, argv=None,
              run_log=None, batch_runs: int = 1, opts: SweepOptions | None = None) -> dict[str, dict]:
    """Run every spec not already in ``store``; return ``{key: record}`` for all specs.

    ``opts`` (else ``jobs``/``batch_runs``) says how: ``jobs > 1`` trains in that many spawned local
    processes (each loads the data from the cache and uses ``cpu_count // jobs`` threads);
    ``batch_runs > 1`` trains up to that many runs that share an architecture stacked in one process
    (:func:`stack_groups`); ``executor`` ``ray``/``slurm`` sends the groups to a Ray cluster or a SLURM job
    array. Whoever trains a run writes its record into the store (atomic, under its own name), so an
    interrupted sweep loses at most the groups in flight. ``list_cells`` prints the grid and ``cell`` runs
    one cell, each ending in :class:`SweepDone`.
    """
    from .executors import run_groups

    opts = opts or SweepOptions(jobs=jobs, batch_runs=batch_runs)
    log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    if opts.list_cells:
        raise SweepDone("\n".join(cell_lines(specs, store)))
    if opts.cell is not None:
        specs = [pick_cell(specs, opts.cell)]
        if opts.remember is not None:  # the cell exists: keep the command for `depthaudit report OUT`
            out, keep = opts.remember
            write_json(Path(out) / "sweep.json", {"schema": "depthaudit.sweep.v1", "argv": list(keep)})
    results, pending = {}, []
    for s in specs:
        rec = store.get(s)
        if rec is not None:
            results[s.key] = rec
        else:
            pending.append(s)
    if opts.cell is not None and not pending:
        raise SweepDone(f"cell {specs[0].key}: already finished ({_summary(results[specs[0].key])}); skipped")
    if opts.stored_only and pending:
        names = ", ".join(s.key for s in pending[:5]) + (", …" if len(pending) > 5 else "")
        raise UsageError(f"{len(pending)} of {len(specs)} cells are not finished ({names}); run them first "
                         "(--cell ID), then report")
    if results and opts.cell is None:
        log(f"{len(results)} of {len(specs)} runs already finished in {store}; skipping them")
    prog = Progress(len(specs), len(results), log)
    groups = stack_groups(pending, opts.batch_runs)
    for group, recs in run_groups(groups, store, opts, data=data, log=log, run_log=run_log, argv=argv):
        for s, rec in zip(group, recs, strict=True):
            results[s.key] = rec
            prog.update(f"{s.key}: {_summary(rec)}")
    if opts.cell is not None:
        rec = results[specs[0].key]
        raise SweepDone(f"cell {specs[0].key}: {_summary(rec)}; stored in {store}. When every cell has finished, "
                        "`depthaudit report OUT` (or the same command without --cell) writes the tables and figures")
    return results
