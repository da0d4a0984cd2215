"""The one sweep mechanism: a list of run specs, a store that remembers finished runs, an executor that trains.

Every experiment (audit pairs, depth ladder, later sweeps) trains through :func:`run_sweep`. The sweep
claims its store for its configuration before anything trains (stores.py), hands the missing runs to an
executor (executors.py), and reports progress. A finished run is stored the moment it ends (atomic
replace), so an interrupted sweep resumes and loses at most the runs in flight; runs already in the store
are skipped and reported as such. Imports go one way: sweep → executors → stores.
"""

import contextlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import progress
from .errors import ConfigError, Interrupted, UsageError
from .executors import REUSED, SweepOptions, batch_cap, execute, execute_group, run_groups, stack_groups
from .io import foreign_json, write_json
from .stores import FileStore, FolderStore, RunSpec, file_lock, read_run_files

__all__ = ["FileStore", "FolderStore", "RunSpec", "SweepOptions", "SweepStatus", "batch_cap", "cell_lines", "execute",
           "execute_group", "file_lock", "pick_cell", "read_run_files", "run_sweep", "stack_groups"]


@dataclass(frozen=True)
class SweepStatus:
    """What a sweep did: the records of its runs, or why it stopped short of the whole grid.

    ``stopped`` is the message of a sweep that did what was asked and no more (``--list-cells``: the grid;
    ``--cell``: that cell's outcome); the command prints it and ends with exit 0, writing no report.
    """

    records: dict[str, dict] = field(default_factory=dict)
    stopped: str | None = None

    @property
    def complete(self) -> bool:
        """Whether every run of the grid is in :attr:`records` (nothing stopped the sweep short)."""
        return self.stopped is None


class Progress:
    """One line per finished run: a bar across runs, elapsed time and an ETA from this session's pace.

    Where bars are drawn (:mod:`depthaudit.progress`: a terminal or a notebook) it is a tqdm bar over the runs
    instead, each finished run's line written above it.
    """

    def __init__(self, total: int, skipped: int, log):
        self.total, self.done, self.new, self.log, self.t0 = total, skipped, 0, log, time.perf_counter()
        self.bar = progress.bar(total, "runs", "run", initial=skipped).__enter__() if total > skipped else None

    def update(self, label: str) -> None:
        """Count one finished run and print the bar."""
        self.done += 1
        self.new += 1
        if self.bar is not None:
            self.log(label)
            self.bar.update()
            return
        el = time.perf_counter() - self.t0
        eta = el / self.new * (self.total - self.done)
        bar = "#" * round(20 * self.done / self.total)
        self.log(f"[{bar:<20}] {self.done}/{self.total} runs  elapsed {_hms(el)}  ETA {_hms(eta)}  | {label}")

    def close(self) -> None:
        """End the bar (if any)."""
        if self.bar is not None:
            self.bar.close()


def _hms(s: float) -> str:
    s = int(s)
    return f"{s // 3600}h{s // 60 % 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def changed_plugins(records) -> list[str]:
    """The plug-in code ``records`` were trained by (``provenance.plugins``) that is not what is loaded now.

    A file whose sha256 now differs, or a module not loaded in this process (the name it registered is now
    another module's, or nobody's: walk 30 W5, W6 reused such runs without a word).
    """
    import sys

    from .io import sha256_file
    from .provenance import plugin_modules
    from .registry import LOADED_AS

    out, seen = [], {}
    for rec in records:
        for p in ((rec or {}).get("provenance") or {}).get("plugins") or []:
            f, want, mod = p.get("file"), p.get("sha256"), p.get("module")
            now = sys.modules.get(mod) if isinstance(mod, str) else None
            here = getattr(now, "__file__", None)  # a module of that name from another file is another module
            if isinstance(mod, str) and mod and (now is None or (isinstance(f, str) and isinstance(here, str) and
                                                                  os.path.realpath(here) != os.path.realpath(f))):
                # (walk 34 W4: a script's __main__ replaced "fa"; the CLI's own __main__ passed for it)
                what = f"{f} (module {mod}, not loaded now)"
                if what not in out:
                    out.append(what)
                continue
            if not f or not want or any(o.startswith(f"{f} (changed since") for o in out):
                continue
            if f not in seen:  # the code loaded now: as it registered (a notebook's unreloaded edit is not it)
                try:
                    seen[f] = LOADED_AS.get(f) or sha256_file(Path(f))
                except (OSError, UsageError):
                    seen[f] = None
            if seen[f] is not None and seen[f] != want:
                out.append(f"{f} (changed since they were trained: another sha256)")
        cfg = (rec or {}).get("config") or {}  # a name the runs were trained under by other code (depthaudit's
        names = {k: cfg.get(k) for k in ("method", "arch", "dataset") if isinstance(cfg.get(k), str)}  # own, say)
        if names:  # that a plug-in now registers (walk 35 W1: --plugin re-registering bp reused built-in bp's runs)
            key = tuple(sorted(names.items()))
            if key not in seen:
                seen[key] = plugin_modules(names)
            had = {p.get("module") for p in ((rec or {}).get("provenance") or {}).get("plugins") or []}
            for m in seen[key]:
                what = f"{m['file']} (module {m['module']}, which now registers a name they were trained under)"
                if m["module"] not in had and what not in out:
                    out.append(what)
    return out


def _summary(rec: dict) -> str:
    acc = rec["final"]["test_acc"]
    return f"{rec['status']}, test_acc {acc:.4f}" if acc is not None else rec["status"]


def cell_lines(specs: list[RunSpec], store) -> list[str]:
    """One line per cell: index, stable id (the run's key), done/pending, what it trains."""
    out = []
    for i, s in enumerate(specs):
        c = s.cfg
        what = c.describe() if hasattr(c, "describe") else ""
        state = "done" if store.get(s) is not None else "pending"
        other = store.other_device(s) if state == "pending" and hasattr(store, "other_device") else None
        if other:  # stored from another kind of device: not reused here
            state = f"pending (a {other} run is stored; not reused on {s.cfg.device})"
        out.append(f"{i}\t{s.key}\t{state}\t{what}")
    return out


def _kept_cells(path: Path) -> int:
    """How many cells the grid of a kept ``sweep.json`` command has (a file older than that count: unknown, huge)."""
    try:
        n = json.loads(path.read_text(encoding="utf-8")).get("cells")
    except (OSError, ValueError, AttributeError):
        return 1 << 62
    return n if isinstance(n, int) and not isinstance(n, bool) else 1 << 62


def pick_cell(specs: list[RunSpec], cell: str) -> RunSpec:
    """The spec a ``--cell`` names: its key, or its index (e.g. ``$SLURM_ARRAY_TASK_ID``)."""
    for s in specs:
        if s.key == cell:
            return s
    if cell.lstrip("-").isdigit() and 0 <= int(cell) < len(specs):
        return specs[int(cell)]
    # (a ConfigError: Python names cell=… and SweepOptions(list_cells=True), the CLI --cell and --list-cells)
    raise ConfigError(f"{{cell={cell}}}: no such cell (ids and indices 0..{len(specs) - 1}: see "
                      "{list_cells=True})")


def run_sweep(specs: list[RunSpec], store, *, data=None, jobs: int = 1, log=None, argv=None,
              run_log=None, batch_runs: int = 1, opts: SweepOptions | None = None) -> SweepStatus:
    """Run every spec not already in ``store``; return its :class:`SweepStatus` (``{key: record}`` for all specs).

    ``opts`` (else ``jobs``/``batch_runs``) says how: ``jobs > 1`` trains in that many spawned local
    processes (each loads the data from the cache and uses ``cpu_count // jobs`` threads);
    ``batch_runs > 1`` trains up to that many runs that share an architecture stacked in one process
    (:func:`stack_groups`); ``executor`` ``ray``/``slurm`` sends the groups to a Ray cluster or a SLURM job
    array. Whoever trains a run writes its record into the store (atomic, under its own name), so an
    interrupted sweep loses at most the groups in flight. ``list_cells`` returns the grid and ``cell`` runs
    one cell, each as a status that ``stopped`` (its message; the caller ends there, writing no report).

    Before anything trains the sweep claims ``store`` for its configuration under the store's lock
    (``store.claim()``: a store of another configuration is refused in one line). An interrupt
    (SIGINT/SIGTERM) stops every worker, keeps what finished and ends in :class:`Interrupted`.
    """
    opts = opts or SweepOptions(jobs=jobs, batch_runs=batch_runs)
    log = log or progress.say
    if opts.list_cells:
        return SweepStatus(stopped="\n".join(cell_lines(specs, store)))
    n_cells = len(specs)  # the whole grid's, kept with a --cell's command
    if opts.cell is not None:
        specs = [pick_cell(specs, opts.cell)]
    if opts.stored_only:  # trains nothing: a missing cell is refused before the store is claimed and before a
        # --cell's command is kept (nothing written: walk 40 W3, a refused --stored-only --cell left sweep.json)
        missing = [s for s in specs if store.get(s, quiet=True) is None]
        if missing:
            names = ", ".join(s.key for s in missing[:5]) + (", …" if len(missing) > 5 else "")
            other = {store.other_device(s) for s in missing} - {None} if hasattr(store, "other_device") else set()
            why = (f" — they are stored as trained on {', '.join(sorted(other))}, and a run is not reused on another "
                   "device (it draws other data orders from one seed): give that --device") if other else ""
            raise UsageError(f"{len(missing)} of {len(specs)} cells are not finished ({names}){why}; run them first "
                             "(--cell ID; Python: SweepOptions(cell=ID)), then report — or drop --stored-only "
                             "(stored_only=True) to train them now")
    if opts.cell is not None:
        if opts.remember is not None:  # the cell exists: keep the command for `depthaudit report OUT`
            out, keep = opts.remember
            if foreign_json(Path(out) / "sweep.json"):  # a user's own file of that name: never replaced
                raise UsageError(f"{Path(out) / 'sweep.json'} exists and is not depthaudit's (a --cell run keeps its "
                                 "command there); move it away or choose another --out")
            if not (Path(out) / "sweep.json").is_file() or store.get(specs[0], quiet=True) is None \
                    or n_cells > _kept_cells(Path(out) / "sweep.json"):  # a finished cell, skipped, leaves the
                # folder's kept command as it is (walk 35 case 166: a narrower grid's skipped cell replaced the
                # array's 12-cell command with its own 3-cell one) — unless its grid is the larger (walk 44 case
                # 123: an audit grown by a skipped cell kept the smaller command, which the grown claim refused)
                write_json(Path(out) / "sweep.json", {"schema": "depthaudit.sweep.v1", "argv": list(keep),
                                                      "cells": n_cells})
    if hasattr(store, "claim"):
        store.claim()
    results, pending = {}, []
    for s in specs:
        rec = store.get(s)
        if rec is not None:
            results[s.key] = rec
        else:
            pending.append(s)
            other = store.other_device(s) if hasattr(store, "other_device") else None
            if other:
                log(f"{s.key}: the stored run trained on {other}; it is not reused on {s.cfg.device} (another "
                    "kind of device draws other data orders from one seed), and this run will replace it")
            elif changed := (store.differs(s) if hasattr(store, "differs") else None):
                if any(not k.endswith("sha256") for k in changed):  # a setting, not a file's content: another
                    # configuration, which the store's identity did not name (a plug-in family that declares no
                    # saturation_identity; walk 26 W: its depths were retrained and replaced)
                    raise UsageError(f"{store.path} holds runs of a different configuration (its run {s.key} differs "
                                     f"in: {', '.join(changed[:6])}); use another output folder, or "
                                     + (store.move_away() if hasattr(store, "move_away") else
                                        f"move {store.path.name} and {store.runs_dir.name} away"))
                log(f"{s.key}: the stored run differs in {', '.join(changed[:4])} (its files changed?); it is "
                    "run again, and this run will replace it")
    if opts.cell is not None and not pending:
        return SweepStatus(results, f"cell {specs[0].key}: already finished ({_summary(results[specs[0].key])}); "
                           "skipped")
    if opts.stored_only and pending:
        names = ", ".join(s.key for s in pending[:5]) + (", …" if len(pending) > 5 else "")
        raise UsageError(f"{len(pending)} of {len(specs)} cells are not finished ({names}); run them first "
                         "(--cell ID; Python: SweepOptions(cell=ID)), then report — or drop --stored-only "
                         "(stored_only=True) to train them now")
    if results and opts.cell is None:
        log(f"{len(results)} of {len(specs)} runs already finished in {store}; skipping them")
    changed = changed_plugins(results.values())
    if changed:  # reused as the store promises (code is no run's identity), but said (walk 25 case 141)
        log(f"depthaudit: note: the reused runs were trained by plug-in code that is not what is loaded now — "
            f"{', '.join(changed)}: they are reused as stored, trained by that code; write to a new --out to train "
            "them with this one")  # (walk 46 case 137: a file not loaded now was said to have "changed")
    prog = Progress(len(specs), len(results), log)
    groups = stack_groups(pending, opts.batch_runs)
    if opts.batch_runs > 1 and len(pending) > 1 and all(len(g) == 1 for g in groups):  # (walk 24 case 189)
        log(f"depthaudit: note: --batch-runs {opts.batch_runs}: none of these {len(pending)} runs can train stacked "
            "(their method, model, optimizer or runner trains one by one: docs/cluster.md); they train one by one")
    try:
        for group, recs in run_groups(groups, store, opts, data=data, log=log, run_log=run_log, argv=argv):
            for s, rec in zip(group, recs, strict=True):
                other = rec.pop(REUSED, False)
                results[s.key] = rec
                prog.update(f"{s.key}: {'stored by another sweep meanwhile, ' if other else ''}{_summary(rec)}")
    except Interrupted:
        raise
    except KeyboardInterrupt:
        # the pool is down here (run_groups stops every worker before the interrupt reaches this line): a worker
        # that stored its run between the signal and its stop has its record on disk, so the count is read from
        # the store, and its assembled file rebuilt from the records (walk 27 W3: one record more than said)
        for s in specs:
            if s.key not in results:
                with contextlib.suppress(Exception):
                    rec = store.get(s, quiet=True)
                    if rec is not None:
                        results[s.key] = rec
        if hasattr(store, "assemble"):
            with contextlib.suppress(Exception):
                store.assemble()
        missing = len(specs) - len(results)  # (of this sweep: a command of several stages, e.g. probes' warm
        # start after its credit mix, has the later stages' runs to train as well)
        who = "every worker stopped" if opts.jobs > 1 or opts.executor != "local" else "the run in flight stopped"
        if not missing:  # every run was in when the interrupt came (e.g. while the workers shut down)
            raise Interrupted(f"interrupted: {who}; all {len(results)} run(s) of this stage are stored "
                              f"in {store}; rerun the same command to finish (nothing is trained again)") from None
        raise Interrupted(f"interrupted: {who}; the {len(results)} finished run(s) are stored in "
                          f"{store}, the run(s) in flight were discarded; rerun the same command to train what is "
                          f"missing ({missing} of the {len(specs)} runs of this stage)") from None
    finally:
        prog.close()
    for path, bad in store.strays([s.key for s in specs]) if hasattr(store, "strays") and opts.cell is None else ():
        log(f"depthaudit: note: {path} {bad}; it is not a run of this command's grid, so no rerun replaces it: move "
            f"it out of {path.parent} (report refuses the folder while it is there)")
    if opts.cell is not None:
        rec = results[specs[0].key]
        then = ("`depthaudit report OUT` (or the same command without --cell) writes" if opts.remember is not None
                else "the same call without cell= writes")  # (from Python no command is kept for `report`)
        return SweepStatus(results, f"cell {specs[0].key}: {_summary(rec)}; stored in {store}. When every cell has "
                           f"finished, {then} the tables and figures")
    return SweepStatus(results)
