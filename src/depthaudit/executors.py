"""Where a sweep's groups of runs train: this process, local worker processes, a Ray cluster, a SLURM array.

Every executor runs the same task, :func:`run_and_store`: train one group (one run, or several stacked),
stamp each record with the executor and host, and write it into the sweep's store atomically under its
own name. The driver only collects; so a driver or worker killed mid-sweep loses at most the groups in
flight, and a re-submitted sweep trains only what is missing. Ray (``pip install "depthaudit[ray]"``) and
submitit (``"depthaudit[slurm]"``) are optional; a missing one is one line naming the install.
"""

import os
import socket
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from pathlib import Path

import torch

from .errors import UsageError
from .sweep import RunSpec, SweepOptions, execute_group

EXECUTORS = ("local", "ray", "slurm")


def where_ran(executor: str) -> dict:
    """Provenance of the process that trained a run: executor, host and any scheduler job ids."""
    out = {"name": executor, "host": socket.gethostname()}
    for env, key in (("SLURM_JOB_ID", "slurm_job_id"), ("SLURM_ARRAY_JOB_ID", "slurm_array_job_id"),
                     ("SLURM_ARRAY_TASK_ID", "slurm_array_task_id")):
        if os.environ.get(env):
            out[key] = os.environ[env]
    return out


def run_and_store(group: list[RunSpec], store, data=None, log=None, argv=None, executor: str = "local",
                  opts: SweepOptions | None = None) -> list[dict]:
    """Train ``group`` (stacked if several), stamp where it ran, store every record; return the records."""
    recs = execute_group(group, data, log=log, argv=argv, opts=opts)
    where = where_ran(executor)
    for s, rec in zip(group, recs, strict=True):
        rec.setdefault("provenance", {})["executor"] = where
        store.put(s, rec)
    return recs


def import_env_plugins() -> None:
    """Import the plug-ins the driver imported (``DEPTHAUDIT_PLUGINS``), so their names resolve here too."""
    from .plugins import import_plugin

    for name in filter(None, os.environ.get("DEPTHAUDIT_PLUGINS", "").split(",")):
        import_plugin(name)


def _worker_init(threads: int, parent: int) -> None:
    """A local worker: its thread share, dies with its parent (pid ``parent``), imports the parent's plug-ins."""
    torch.set_num_threads(threads)
    _die_with_parent(parent)
    import_env_plugins()


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


def _remote_task(group, store, argv, executor: str, threads: int, opts: SweepOptions):
    """What a Ray task or a SLURM array task runs."""
    torch.set_num_threads(max(1, threads))
    import_env_plugins()
    return run_and_store(group, store, None, None, argv, executor, opts)


def run_groups(groups: list[list[RunSpec]], store, opts: SweepOptions, data=None, log=None, run_log=None,
               argv=None) -> Iterator[tuple[list[RunSpec], list[dict]]]:
    """Train every group on ``opts.executor``; yield ``(group, records)`` as each finishes (already stored)."""
    log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    if not groups:
        return
    if opts.executor not in EXECUTORS:
        raise UsageError(f"--executor {opts.executor!r} not known; use one of {', '.join(EXECUTORS)}")
    if opts.executor == "ray":
        yield from _ray(groups, store, opts, argv, log)
    elif opts.executor == "slurm":
        yield from _slurm(groups, store, opts, argv, log)
    elif opts.jobs <= 1 or len(groups) <= 1:
        for g in groups:
            c = g[0].cfg
            what = c.describe() + ", " if hasattr(c, "describe") else ""
            stop = f" (first {c.stop_after})" if getattr(c, "stop_after", None) else ""
            budget = f", {c.epochs} epochs" if hasattr(c, "epochs") else ""
            if len(g) == 1:
                log(f"run {g[0].key}: {what}seed {c.seed}{budget}{stop}")
            else:
                log(f"{len(g)} runs stacked ({', '.join(s.key for s in g)}): {c.method}, {c.epochs} epochs{stop}")
            yield g, run_and_store(g, store, data, run_log, argv, "local", opts)
    else:
        yield from _local_pool(groups, store, opts, argv, log)


def _local_pool(groups, store, opts: SweepOptions, argv, log):
    """``opts.jobs`` spawned worker processes; a dead worker's pool is replaced once.

    A worker that dies (SIGKILL, out of memory) breaks the pool: what had not finished is retried once in a
    fresh pool, so the sweep loses at most the work in flight.
    """
    threads = max(1, (os.cpu_count() or 1) // opts.jobs)
    remaining, retried = list(groups), False
    while remaining:
        finished, broken = set(), False
        with ProcessPoolExecutor(opts.jobs, mp_context=get_context("spawn"), initializer=_worker_init,
                                 initargs=(threads, os.getpid())) as pool:
            futs = {pool.submit(run_and_store, g, store, None, None, argv, "local", opts): i
                    for i, g in enumerate(remaining)}
            for fut in as_completed(futs):
                try:
                    recs = fut.result()
                except BrokenProcessPool:
                    broken = True
                    continue
                finished.add(futs[fut])
                yield remaining[futs[fut]], recs
        remaining = [g for i, g in enumerate(remaining) if i not in finished]
        if broken:
            if retried:
                raise UsageError("a worker process died again (killed, or out of memory?); the finished runs are "
                                 "stored: rerun the same command with fewer --jobs to train what is missing")
            retried = True
            log(f"a worker process died (killed, or out of memory?); the {len(remaining)} unfinished group(s) "
                "start again in a fresh pool")


def _ray(groups, store, opts: SweepOptions, argv, log):
    try:
        import ray
    except ImportError:
        raise UsageError('--executor ray needs Ray: pip install "depthaudit[ray]"') from None
    address = opts.ray_address or os.environ.get("RAY_ADDRESS") or None
    started = not ray.is_initialized()
    if started:
        env = {k: os.environ[k] for k in ("DEPTHAUDIT_PLUGINS", "DEPTHAUDIT_CACHE_DIR") if k in os.environ}
        ray.init(address=address, num_cpus=None if address else os.cpu_count(), include_dashboard=False,
                 log_to_driver=False, runtime_env={"env_vars": env} if env else None)
    log(f"ray: {len(groups)} tasks on {address or 'a local cluster'} ({opts.cpus_per_run:g} CPU, "
        f"{opts.gpus_per_run:g} GPU per task)")
    task = ray.remote(num_cpus=opts.cpus_per_run, num_gpus=opts.gpus_per_run, max_retries=0)(_remote_task)
    try:
        refs = {task.remote(g, store, argv, "ray", int(opts.cpus_per_run), opts): g for g in groups}
        while refs:
            done, _ = ray.wait(list(refs), num_returns=1)
            g = refs.pop(done[0])
            yield g, ray.get(done[0])
    finally:
        if started:
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
    log(f"slurm: {n} array tasks submitted (job {jobs[0].job_id.split('_')[0]}; logs in {folder.parent}); "
        "waiting — Ctrl-C leaves them running and a rerun collects what finished")
    pending, failed = dict(zip(jobs, groups, strict=True)), []
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
    if failed:
        raise UsageError(f"{len(failed)} SLURM task(s) failed ({', '.join(failed[:5])}); their logs are in "
                         f"{folder.parent}; rerun the same command to retry only what is missing")
