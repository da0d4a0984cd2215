"""Where a sweep's groups of runs train: this process, local worker processes, a Ray cluster, a SLURM array.

Executors own execution: every one runs the same task, :func:`run_and_store`: take each run's lock, skip
a run another sweep stored meanwhile, train the rest of the group (one run, or several stacked), stamp each
record with the executor and host, and write it into the sweep's store atomically under its own name. The
driver only collects; so a driver or worker killed mid-sweep loses at most the groups in flight, and a
re-submitted sweep trains only what is missing. An interrupt (SIGINT/SIGTERM) stops every worker within
seconds (:func:`_stop_pool`, Ray's cancel) and reaches the caller as ``KeyboardInterrupt``; a SLURM array
keeps running and the message names its ``scancel``. Ray (``pip install "depthaudit[ray]"``) and submitit
(``"depthaudit[slurm]"``) are optional; a missing one is one line naming the install.
"""

# imports inside functions: ray and submitit are optional extras, imported by the executor that uses them
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import ClassVar

import torch

from . import progress
from .batched import group_key
from .config import TrainConfig
from .errors import Interrupted, UsageError
from .fields import arg, check_choices, check_ranges, check_types, refuse
from .io import remove_in_flight
from .plugins import guard_os_exit, import_plugin, plugin_error, process_state, restore_process_state
from .runlog import make_watch
from .runner import run_recipe, run_recipe_stacked
from .stores import RunSpec


@dataclass(frozen=True)
class SweepOptions:
    """How a sweep runs: where (executor), how many at once, which cells, and where runs are watched."""

    jobs: int = arg(1, help="parallel local training processes", lo=1, metavar="N",
                    group="sweep execution (README: on a cluster)")
    batch_runs: int | None = arg(1, help="train up to N runs of one shape stacked in one process; 1 = one by one",
                                 lo=1, metavar="N", advanced=True, default_text="16 on CUDA, 1 on CPU")
    cuda_graphs: str = arg("auto", help="replay each stacked step's forward and backward as a CUDA graph: the same "
                           "numbers bit for bit, 5.4x faster on an H200 (auto: on CUDA, for methods that allow it)",
                           choices=("auto", "off"), advanced=True)
    executor: str = arg("local", help="local processes, Ray tasks or a SLURM array via submitit",
                        choices=("local", "ray", "slurm"))
    cell: str | None = arg(None, help="run only this cell (its id or index, e.g. $SLURM_ARRAY_TASK_ID); a finished "
                           "cell is skipped", metavar="ID")
    list_cells: bool = arg(False, help="print the grid, one run per line (id, status), and stop")
    # train nothing; refuse if a cell is missing (``depthaudit report`` of cells)
    stored_only: bool = arg(False, help="write the report from the stored cells only: train nothing, refuse if a cell "
                            "is missing (what `depthaudit report` runs)", advanced=True)
    log: tuple[str, ...] = arg((), help="also log every run live to tensorboard and/or wandb",
                               choices=("tensorboard", "wandb"), metavar="TO")
    log_dir: str | None = arg(None, help="TensorBoard/W&B files", metavar="DIR", advanced=True,
                              default_text="OUT/logs")
    ray_address: str | None = arg(None, help="join this Ray cluster", metavar="ADDR", advanced=True,
                                  default_text="$RAY_ADDRESS, else start a local one")
    cpus_per_run: float = arg(1.0, help="Ray/SLURM CPUs per task", lo=0, lo_open=True, metavar="X", advanced=True)
    gpus_per_run: float = arg(0.0, help="Ray GPUs per task, may be fractional", lo=0, metavar="X", advanced=True)
    slurm_partition: str | None = arg(None, help="SLURM partition", metavar="P", advanced=True)
    slurm_time: int = arg(240, help="SLURM minutes per array task", lo=1, metavar="MIN", advanced=True)
    slurm_gpus: int = arg(0, help="SLURM GPUs per task", lo=0, advanced=True)
    slurm_parallelism: int = arg(64, help="SLURM array tasks running at once", lo=1, advanced=True)
    # submitit's cluster ("local" runs array tasks as local processes: tests)
    slurm_cluster: str | None = arg(None, help="submitit's cluster", hidden=True)
    slurm_folder: str | None = None  # submitit's logs (default: <out>/slurm)
    remember: tuple | None = None  # (out, argv): write out/sweep.json once --cell is found (commands.args)
    # the fields that say how runs train: given where nothing trains (--list-cells, --stored-only), each is said
    # to have no effect (walk 24 case 110, walk 25 W5, walk 26 case 160)
    TRAINS: ClassVar[tuple[str, ...]] = ("jobs", "batch_runs", "cuda_graphs", "log", "executor")

    def __post_init__(self):
        check_types(self)  # the Python API's path: jobs=0, executor='bogus', cell=0 are one line here, before a
        check_ranges(self)  # folder is claimed (the CLI's parser applies the same declarations)
        check_choices(self)
        if self.log_dir is not None and not self.log_dir.strip():  # (the cwd is not a log folder)
            raise refuse(self, "{log_dir} '' is an empty path; give a folder, or leave it out (OUT/logs)")
        if self.cell is not None and self.list_cells:
            raise refuse(self, "{cell} and {list_cells} exclude each other; list first, then run one cell")
        if (self.jobs or 1) > 1 and self.executor != "local":
            raise refuse(self, f"{{jobs}} is for the local executor; with {{executor={self.executor}}} every cell is "
                         "its own task")
        main_file = getattr(sys.modules.get("__main__"), "__file__", None)
        if (self.jobs or 1) > 1 and self.cell is None and not self.list_cells and main_file is not None \
                and not Path(main_file).is_file():  # a spawned worker imports the main script: every one died
            # at start and the sweep blamed memory (python - / python -c have no script to import)
            raise refuse(self, "{jobs} > 1 starts worker processes that import the main script, and "
                         f"{main_file.replace('{', '{{').replace('}', '}}')} is not a file (python - or python -c?); "
                         "save the script to a file, with the sweep under `if __name__ == \"__main__\":`, or use "
                         "{jobs=1}")
        if self.executor == "slurm" and self.slurm_cluster is None and not (self.list_cells or self.stored_only) \
                and shutil.which("sbatch") is None:  # (submitit would quietly run the tasks here instead)
            raise refuse(self, "{executor=slurm}: no SLURM here (sbatch is not on PATH); run the command where "
                         "SLURM is (a login node), or use the local executor")
        extra = {"ray": ("ray", "Ray", "ray"), "slurm": ("submitit", "submitit", "slurm")}.get(self.executor)
        if extra and self.slurm_cluster is None and not (self.list_cells or self.stored_only) \
                and not installed(extra[0]):  # before any
            raise refuse(self, f"{{executor={self.executor}}} needs {extra[1]}: pip install "  # folder is claimed
                         f'"depthaudit[{extra[2]}]"')  # (walk 17 cases 126, 127; submitit's local stand-in: at use)


def installed(module: str) -> bool:
    """Whether an optional extra's module can be imported here (found, not imported: Ray takes seconds to import)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def execute(spec: RunSpec, data=None, log=None, argv=None) -> dict:
    """Run one spec and return its result record: the spec's own runner, else the training recipe's."""
    return (spec.runner or run_recipe)(spec, data, log, argv)


def execute_group(specs: list[RunSpec], data=None, log=None, argv=None, opts=None) -> list[dict]:
    """Run a group of specs: one alone as :func:`execute`, several stacked in one process (batched.py).

    With ``opts.log`` each run is mirrored live to TensorBoard/W&B (a spec with its own runner: after it ends).
    """
    kinds = opts.log if opts is not None else ()
    group = Path(opts.log_dir).parent.name if kinds and opts.log_dir else "depthaudit"
    watches = [make_watch(kinds, opts.log_dir if kinds else None, s.key,
                          s.cfg.to_dict() if hasattr(s.cfg, "to_dict") else {}, group) for s in specs]
    if len(specs) > 1:
        graphs = opts is None or opts.cuda_graphs != "off"
        return run_recipe_stacked(specs, data, log, argv, watches=watches, graphs=graphs)
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

    On the CPU stacking is at parity with one by one (benchmarks/bench_batched.py: 0.91–1.02× for bp, fa and
    dfa): nothing to gain, and one by one a stopped sweep loses only the run in flight, not a stacked group.
    """
    if batch_runs is not None:
        return batch_runs
    return 16 if str(device).startswith("cuda") else 1


EXECUTORS = ("local", "ray", "slurm")


def where_ran(executor: str) -> dict:
    """Provenance of the process that trained a run: executor, host and any scheduler job ids."""
    out = {"name": executor, "host": socket.gethostname()}
    for env, key in (("SLURM_JOB_ID", "slurm_job_id"), ("SLURM_ARRAY_JOB_ID", "slurm_array_job_id"),
                     ("SLURM_ARRAY_TASK_ID", "slurm_array_task_id")):
        if os.environ.get(env):
            out[key] = os.environ[env]
    return out


REUSED = "_stored_by_another_sweep"  # in a returned record (never stored): another sweep trained it meanwhile


def run_and_store(group: list[RunSpec], store, data=None, log=None, argv=None, executor: str = "local",
                  opts: SweepOptions | None = None) -> list[dict]:
    """Train ``group`` (stacked if several), stamp where it ran, store every record; return the records.

    Each run's lock is held while it trains (taken in one global order, so two sweeps never deadlock): a
    run another sweep is training is waited for, and what that sweep stored is returned, not retrained.
    """
    locks = getattr(store, "run_lock", None)
    with ExitStack() as held:
        if locks is not None:
            for s in sorted(group, key=lambda s: s.key):
                held.enter_context(locks(s))
        done = {s.key: store.get(s, quiet=True) for s in group} if locks is not None else {}
        todo = [s for s in group if done.get(s.key) is None]
        recs = execute_group(todo, data, log=log, argv=argv, opts=opts) if todo else []
        where = where_ran(executor)
        for s, rec in zip(todo, recs, strict=True):
            rec.setdefault("provenance", {})["executor"] = where
            store.put(s, rec)
            done[s.key] = rec
        for s in group:
            if s not in todo:
                done[s.key] = {**done[s.key], REUSED: True}
        return [done[s.key] for s in group]


def _busy(group: list[RunSpec], store) -> bool:
    """Whether another process holds the lock of a run in ``group`` (it is training it now)."""
    locks = getattr(store, "run_lock", None)
    if locks is None:
        return False
    for s in group:
        with locks(s, wait=False) as free:
            if not free:
                return True
    return False


def import_env_plugins() -> None:
    """Import the plug-ins the driver imported (``DEPTHAUDIT_PLUGINS``), so their names resolve here too.

    What an import changed in the process (working folder, torch's defaults, signal handlers) is undone as the
    driver undid it, unsaid (the driver said it): a worker trains as the driver would (walk 29 W8).
    """
    cwd, before = os.getcwd(), process_state()
    try:
        for name in filter(None, os.environ.get("DEPTHAUDIT_PLUGINS", "").split(",")):
            import_plugin(name)
    finally:
        if os.getcwd() != cwd:
            os.chdir(cwd)
        restore_process_state(before, quiet=True)


def _tracker_ignoring_hangup() -> None:
    """Start multiprocessing's resource tracker with SIGHUP ignored (the disposition survives its exec).

    It ignores SIGINT and SIGTERM itself; a terminal's hang-up reaches the whole group, and the driver, not the
    tracker, ends the sweep (walk 13 case 106: the tracker died printing a KeyError traceback).
    """
    from multiprocessing import resource_tracker

    if threading.current_thread() is not threading.main_thread():
        return
    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        resource_tracker.ensure_running()
    finally:
        signal.signal(signal.SIGHUP, old)


def _worker_init(threads: int, parent: int) -> None:
    """A local worker: its thread share, dies with its parent (pid ``parent``), imports the parent's plug-ins.

    Ctrl-C reaches a terminal's whole process group: a worker ignores SIGINT and the driver stops it. SIGTERM
    (the driver's, or a ``kill`` of the group) ends it at once, removing any half-written temp file first.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # (a terminal's hang-up reaches the group too: the driver stops it)
    signal.signal(signal.SIGTERM, _worker_term)
    torch.set_num_threads(threads)
    _die_with_parent(parent)
    guard_os_exit()  # a plug-in's os._exit(n) in a worker: named as the plug-in's, not a worker "killed" (walk 28 W1)
    global _INIT_ERROR
    try:
        import_env_plugins()
    except UsageError as exc:  # (a plug-in that fails to import only here): raised by the worker's first task, so
        _INIT_ERROR = exc  # the driver prints its one line; raised from an initializer, it was a traceback per
        # worker and a pool "killed, or out of memory?" (walk 28 W9)


_INIT_ERROR: UsageError | None = None  # a worker's plug-in import that failed (_worker_init), for its tasks


def _worker_term(signum, frame) -> None:
    remove_in_flight()
    os._exit(128 + signum)


def _die_with_parent(parent: int) -> None:
    """Never outlive the sweep: the kernel kills us when the parent dies (Linux), else a watchdog thread does."""
    try:
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

    threading.Thread(target=watch, daemon=True).start()


def _remote_task(group, store, argv, executor: str, threads: int, opts: SweepOptions):
    """What a Ray task or a SLURM array task runs."""
    torch.set_num_threads(max(1, threads))
    import_env_plugins()
    return _pool_task(group, store, argv, executor, opts)


def heartbeat(group) -> "callable":
    """A worker's progress: its epoch lines at every tenth of the budget (and the last), every other line as is.

    A spawned worker draws no bar; without this a 100-epoch run in ``--jobs N`` is silent until it ends.
    Lines are whole (``print`` with flush), so workers writing to one stderr do not tear each other's.
    """
    import re
    import sys

    who = group[0].key if len(group) == 1 else f"{len(group)} stacked runs ({group[0].key}, …)"

    def say(msg: str) -> None:
        m = re.search(r"epoch (\d+)/(\d+)", msg)
        if m and int(m[1]) % max(1, int(m[2]) // 10) and m[1] != m[2]:
            return
        msg = msg.strip()  # (a line the run already names, "grown: epoch 1/2", is not named twice: walk 20 case 191)
        print(f"  {msg}" if msg.startswith(f"{who}: ") else f"  {who}: {msg}", file=sys.stderr, flush=True)

    return say


def _pool_task(group, store, argv, executor: str, opts: SweepOptions, beat: bool = False):
    """What a worker process runs: :func:`run_and_store`; an error a user's plug-in caused is named here.

    ``beat``: print the run's progress (:func:`heartbeat`; the driver asks for it when it shows progress).

    Only here does the traceback hold the plug-in's frames (file and line); an exception sent back to the
    driver arrives without them. So a plug-in's error leaves the worker as the same one line (a
    :class:`UsageError`) that ``--jobs 1`` prints; any other error goes back as it is.
    """
    if _INIT_ERROR is not None:
        raise _INIT_ERROR
    try:
        return run_and_store(group, store, None, heartbeat(group) if beat else None, argv, executor, opts)
    except (Exception, SystemExit, KeyboardInterrupt) as exc:  # (a worker ignores SIGINT: a KeyboardInterrupt here
        blamed = plugin_error(exc)  # was raised by code, e.g. a plug-in's; sys.exit(0) must not end the sweep as 0)
        if blamed is not None:
            raise blamed from None
        raise


def run_groups(groups: list[list[RunSpec]], store, opts: SweepOptions, data=None, log=None, run_log=None,
               argv=None) -> Iterator[tuple[list[RunSpec], list[dict]]]:
    """Train every group on ``opts.executor``; yield ``(group, records)`` as each finishes (already stored).

    Groups another sweep is training right now go last (by then their records are usually stored).
    """
    log = log or progress.say
    if not groups:
        return
    if opts.executor not in EXECUTORS:
        raise UsageError(f"--executor {opts.executor!r} not known; use one of {', '.join(EXECUTORS)}")
    busy = [_busy(g, store) for g in groups]
    groups = [g for g, b in zip(groups, busy, strict=True) if not b] + \
        [g for g, b in zip(groups, busy, strict=True) if b]
    if opts.executor == "ray":
        yield from _ray(groups, store, opts, argv, log)
    elif opts.executor == "slurm":
        yield from _slurm(groups, store, opts, argv, log)
    elif opts.jobs <= 1 or len(groups) <= 1:
        for g in groups:
            c = g[0].cfg
            what = c.describe() + ", " if hasattr(c, "describe") else ""
            stop = f" (first {c.stop_after})" if getattr(c, "stop_after", None) else ""
            budget = f", {c.epochs} epochs" if hasattr(c, "epochs") and getattr(c, "epoch_budget", True) else ""
            if len(g) == 1:
                log(f"run {g[0].key}: {what}seed {c.seed}{budget}{stop}")
            else:
                log(f"{len(g)} runs stacked ({', '.join(s.key for s in g)}): {c.method}, {c.epochs} epochs{stop}")
            yield g, run_and_store(g, store, data, run_log, argv, "local", opts)
    else:
        yield from _local_pool(groups, store, opts, argv, log)


@contextmanager
def _signals_ignored():
    """SIGINT/SIGTERM ignored for the block (a second Ctrl-C must not cut the cleanup short); main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def _signals_deferred(got: list):
    """SIGINT/SIGTERM recorded in ``got`` during the block (main thread only), then raised again after it.

    The block sees ``got`` fill and can cut its own waiting short; its cleanup is never cut by an exception
    raised inside multiprocessing's internals, and the interrupt still ends the command (exit 130) after it.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, lambda signum, frame: got.append(signum)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if got:
        signal.raise_signal(got[0])


def _end(procs: list, grace: float) -> None:
    """SIGTERM to every live process of ``procs`` (each removes its temp files and exits), SIGKILL after ``grace``."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + grace
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(1.0)


def _stop_pool(pool: ProcessPoolExecutor, grace: float = 3.0) -> None:
    """Stop every worker of ``pool`` now (:func:`_end`), signals ignored: the driver is already stopping."""
    with _signals_ignored():
        _end(list((getattr(pool, "_processes", None) or {}).values()), grace)
        pool.shutdown(wait=False, cancel_futures=True)


def _close_pool(pool: ProcessPoolExecutor, log, grace: float = 10.0) -> None:
    """Shut the pool down once its work is in; a worker that does not exit within ``grace`` s is stopped.

    Every group's record is stored by now, so stopping a worker loses nothing; one that lingers is kept alive
    by something else (a plug-in's non-daemon thread, which its interpreter would wait for forever). An
    interrupt meanwhile stops the workers at once and then ends the command (:func:`_signals_deferred`).
    """
    got: list = []
    with _signals_deferred(got):
        procs = list((getattr(pool, "_processes", None) or {}).values())  # (shutdown forgets them)
        pool.shutdown(wait=False)
        deadline = time.monotonic() + grace
        for p in procs:
            while p.is_alive() and not got and time.monotonic() < deadline:
                p.join(0.1)
        stuck = [p for p in procs if p.is_alive()]
        if stuck and not got:
            why = ("a plug-in's thread still running?" if os.environ.get("DEPTHAUDIT_PLUGINS") else
                   "slow to shut down on a busy machine; nothing was lost")
            log(f"depthaudit: note: {len(stuck)} worker process(es) did not exit within {grace:g} s after their runs "
                f"were stored ({why}); stopped")
        _end(stuck, 3.0)


def spawnable(groups) -> None:
    """Refuse, before a worker starts, a sweep that spawned workers could not rebuild (one line: the fix).

    A spawned worker knows the methods, models and datasets that its imports register (the main script's
    among them, re-imported; SweepOptions refuses a main script that is not a file), so one registered in an
    interactive ``__main__`` (a notebook cell), which no worker can import, is unknown there.
    """
    from .data import DATASETS
    from .methods import METHODS
    from .models import MODELS

    if getattr(sys.modules.get("__main__"), "__file__", None) is not None:
        return
    for reg, attr in ((METHODS, "method"), (MODELS, "arch"), (DATASETS, "dataset")):  # (the runs' registries)
        for name in {getattr(s.cfg, attr, None) for g in groups for s in g} - {None}:
            obj = reg._items.get(name) if hasattr(reg, "_items") else None
            if getattr(obj, "__module__", None) == "__main__":
                raise UsageError(f"{reg.kind} {name!r} is registered in this interactive session (__main__), which "
                                 "worker processes cannot import; put it in a module and import that (on the CLI: "
                                 "--plugin MODULE), or use jobs=1")


def _unknown_here(wanted: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """In a worker: which ``(registry, name)`` pairs its imports did not register."""
    from .data import DATASETS
    from .methods import METHODS
    from .models import MODELS

    if _INIT_ERROR is not None:
        raise _INIT_ERROR
    regs = {"method": METHODS, "model": MODELS, "dataset": DATASETS}
    return [(kind, name) for kind, name in wanted if name not in regs[kind]]


def workers_know(cfgs, opts: SweepOptions) -> None:
    """Refuse, before any folder is claimed, a ``jobs > 1`` sweep whose workers will not know a name it uses.

    A spawned worker imports the main script as a module and the ``DEPTHAUDIT_PLUGINS``: what the script registers
    under ``if __name__ == "__main__":`` (or in a module it imports only there) is unknown to it, and the sweep
    failed in a worker, after a run had trained, as an "unknown method" (walk 29 W5). Asked of one worker, started
    only where a run names something registered outside depthaudit and the plug-ins the workers import.
    """
    if opts.executor != "local" or (opts.jobs or 1) <= 1 or opts.list_cells or opts.stored_only \
            or opts.cell is not None or getattr(sys.modules.get("__main__"), "__file__", None) is None:
        return  # (an interactive __main__ is spawnable()'s to refuse)
    from .data import DATASETS
    from .methods import METHODS
    from .models import MODELS

    plugins = [n for n in os.environ.get("DEPTHAUDIT_PLUGINS", "").split(",") if n]
    theirs = lambda mod: mod.startswith("depthaudit") or any(mod == n or mod.startswith(n + ".")  # noqa: E731
                                                           for n in plugins)
    wanted = sorted({(kind, name) for c in cfgs for kind, reg, name in (
        ("method", METHODS, c.method), ("model", MODELS, c.arch), ("dataset", DATASETS, c.dataset))
        if name in reg and not theirs(getattr(reg.get(name), "__module__", "") or "")})
    if not wanted:
        return
    with ProcessPoolExecutor(1, mp_context=get_context("spawn"), initializer=_worker_init,
                             initargs=(1, os.getpid())) as pool:
        missing = pool.submit(_unknown_here, wanted).result()
    if missing:
        kind, name = missing[0]
        raise UsageError(f"{kind} {name!r} is registered in this process but not in the --jobs worker processes (they "
                         "import the script as a module: what it registers under `if __name__ == \"__main__\":`, "
                         "or in a module it imports only there, is unknown to them); register it at the script's "
                         "top level or in a module imported there (on the CLI: --plugin MODULE), or use jobs=1")


def _local_pool(groups, store, opts: SweepOptions, argv, log):
    """``opts.jobs`` spawned worker processes; a dead worker's pool is replaced once.

    A worker that dies (SIGKILL, out of memory) breaks the pool: what had not finished is retried once in a
    fresh pool, so the sweep loses at most the work in flight. An interrupt (or any error) stops every
    worker before it propagates: no worker trains on after the driver gave up.
    """
    spawnable(groups)
    threads = max(1, (os.cpu_count() or 1) // opts.jobs)
    remaining, retried = list(groups), False
    while remaining:
        finished, broken = set(), False
        _tracker_ignoring_hangup()
        pool = ProcessPoolExecutor(opts.jobs, mp_context=get_context("spawn"), initializer=_worker_init,
                                   initargs=(threads, os.getpid()))
        try:
            futs = {}
            for i, g in enumerate(remaining):
                try:
                    futs[pool.submit(_pool_task, g, store, argv, "local", opts, log is progress.say)] = i
                except BrokenProcessPool:  # a worker died while groups were still being handed out
                    broken = True
                    break
            procs = list((getattr(pool, "_processes", None) or {}).values())  # (how a dead one ended: its exitcode)
            pending = set(futs)
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    try:
                        recs = fut.result()
                    except BrokenProcessPool:
                        broken = True
                        continue
                    finished.add(futs[fut])
                    yield remaining[futs[fut]], recs
        except BaseException:
            _stop_pool(pool)
            raise
        _close_pool(pool, log)  # every group is in: a Ctrl-C now stops the workers, then ends the command
        remaining = [g for i, g in enumerate(remaining) if i not in finished]
        if broken:
            time.sleep(0.5)  # a signal to the whole group killed the worker: let the driver's own arrive first
            how, fix = _how_died(procs)
            if retried:
                raise UsageError(f"a worker process died again ({how}); the finished runs are stored: {fix}")
            retried = True
            log(f"a worker process died ({how}); the {len(remaining)} unfinished group(s) start again in a fresh pool")


def _how_died(procs) -> tuple[str, str]:
    """How a pool's dead worker ended (from its exit code) and what to do, for the driver's line."""
    codes = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
    term = 128 + signal.SIGTERM  # a worker's SIGTERM handler (_worker_term) exits so: a kill, not its own end
    own = [c for c in codes if c > 0 and c != term]  # the others stopped when the pool broke (by SIGTERM)
    fewer = "rerun the same command with fewer --jobs to train what is missing"
    if own:  # it ended itself: not a kill (walk 28 W1 was blamed on memory)
        return (f"it exited with status {own[0]}, not killed: code it ran ended the process (a compiled library's "
                "crash or abort?)", "rerun with --jobs 1 to see the error in this process")
    sigs = [-c if c < 0 else signal.SIGTERM for c in codes]
    if sigs:
        sig = next((x for x in sigs if x != signal.SIGTERM), sigs[0])
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"killed by {name}: out of memory, or a kill?", fewer
    return "killed, or out of memory?", fewer


def _ray(groups, store, opts: SweepOptions, argv, log):
    try:
        import ray
    except ImportError:
        raise UsageError('--executor ray needs Ray: pip install "depthaudit[ray]"') from None
    address = opts.ray_address or os.environ.get("RAY_ADDRESS") or None
    started = not ray.is_initialized()
    if started:
        env = {k: os.environ[k] for k in ("DEPTHAUDIT_PLUGINS", "DEPTHAUDIT_CACHE_DIR") if k in os.environ}
        try:
            ray.init(address=address, num_cpus=None if address else os.cpu_count(), include_dashboard=False,
                     log_to_driver=False, runtime_env={"env_vars": env} if env else None)
        except (KeyboardInterrupt, UsageError):
            raise
        except Exception as exc:  # noqa: BLE001 (Ray's own: a node that timed out, a cluster it cannot reach)
            with contextlib.suppress(Exception):  # (what it started half-way goes too)
                ray.shutdown()
            what = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
            raise UsageError(f"--executor ray: the Ray cluster {'at ' + address if address else '(local)'} did not "
                             f"start ({what}); check its memory and logs, or use --executor local") from None
    log(f"ray: {len(groups)} tasks on {address or 'a local cluster'} ({opts.cpus_per_run:g} CPU, "
        f"{opts.gpus_per_run:g} GPU per task)")
    task = ray.remote(num_cpus=opts.cpus_per_run, num_gpus=opts.gpus_per_run, max_retries=0)(_remote_task)
    refs = {}
    try:
        refs = {task.remote(g, store, argv, "ray", int(opts.cpus_per_run), opts): g for g in groups}
        while refs:
            done, _ = ray.wait(list(refs), num_returns=1)
            g = refs.pop(done[0])
            yield g, ray.get(done[0])
    except BaseException:
        # interrupted (or failed): no task trains on. A cluster we started is shut down whole below, which
        # kills its workers; force-cancelling a task that completes at that moment can abort Ray's driver
        # ("unexpected system state" in TaskManager::CompletePendingTask, seen on Ray 2.x), so only the tasks
        # on a cluster we joined (and must leave running) are cancelled one by one
        if not started:
            with _signals_ignored():
                for ref in refs:
                    try:
                        ray.cancel(ref, force=True)
                    except Exception:  # noqa: S110 - already finished or gone
                        pass
        raise
    finally:
        if started:
            with _signals_ignored():
                ray.shutdown()


def _slurm(groups, store, opts: SweepOptions, argv, log):
    try:
        import submitit
    except ImportError:
        raise UsageError('--executor slurm needs submitit: pip install "depthaudit[slurm]"') from None
    root = Path(getattr(store, "root", None) or Path(store.path).parent)
    folder = Path(opts.slurm_folder or root / "slurm") / "%j"
    ex = submitit.AutoExecutor(folder=folder, cluster=opts.slurm_cluster)
    params = {"timeout_min": opts.slurm_time, "slurm_array_parallelism": opts.slurm_parallelism,
              "cpus_per_task": max(1, int(opts.cpus_per_run)), "name": "depthaudit"}
    if opts.slurm_partition:
        params["slurm_partition"] = opts.slurm_partition
    if opts.slurm_gpus:
        params["gpus_per_node"] = opts.slurm_gpus
    ex.update_parameters(**params)
    n = len(groups)
    jobs = ex.map_array(_remote_task, groups, [store] * n, [argv] * n, ["slurm"] * n,
                        [max(1, int(opts.cpus_per_run))] * n, [opts] * n)
    job_id = jobs[0].job_id.split("_")[0]
    log(f"slurm: {n} array tasks submitted (job {job_id}; logs in {folder.parent}); "
        "waiting — Ctrl-C leaves them running and a rerun collects what finished")
    pending, failed = dict(zip(jobs, groups, strict=True)), []
    try:
        while pending:
            for job in [j for j in pending if j.done()]:
                g = pending.pop(job)
                try:
                    recs = job.result()
                except Exception as exc:  # the task's own failure: name it, keep collecting the others
                    failed.append(job.job_id)
                    log(f"slurm task {job.job_id} ({', '.join(s.key for s in g)}) failed: "
                        f"{(str(exc).strip().splitlines() or ['?'])[-1]}")
                    continue
                yield g, recs
            if pending:
                time.sleep(1.0)
    except KeyboardInterrupt:
        cancel = "scancel " + job_id if opts.slurm_cluster in (None, "slurm") else \
            f"kill the local processes of job {job_id}"
        raise Interrupted(f"interrupted: {len(pending)} SLURM array task(s) of job {job_id} are still queued or "
                          f"running and store their runs when they finish (a rerun collects them); to stop them: "
                          f"{cancel}") from None
    if failed:
        raise UsageError(f"{len(failed)} SLURM task(s) failed ({', '.join(failed[:5])}); their logs are in "
                         f"{folder.parent}; rerun the same command to retry only what is missing")
