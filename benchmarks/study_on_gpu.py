"""The whole published study on one GPU: Table 1, §5 and the ladder at three seeds, side by side, to a deadline.

One prepared command trains every cell of

* **Table 1** — ``audit`` of bp ep dfa sb cb, each trained and against its frozen-blocks baseline, 100 epochs;
* **§5** — ``intervene``: bp dfa sb cb × λ {0, 1e-4, 1e-2, 1e-1}, trained and frozen, 30 epochs;
* **the ladder** — bp fa dfa, k = 0..4, ResMLP d=256 L=4, 100 epochs;

at seeds 42 123 456, into resumable stores under ``--out`` (``table1/<part>``, ``s5/<part>``, ``ladder``). It
starts one ``depthaudit`` process per part, all at once on the one device: stackable methods train stacked
(the CLI's default on CUDA, up to 16 runs a group) and graphed where the method allows (``--cuda-graphs auto``);
methods that cannot stack (sb, cb) get one process per seed, so no single process holds the study up. Every
``--status-every`` seconds it prints each part's epoch and finished runs. At ``--deadline`` seconds it interrupts
every process still running: the runs that finished are in the stores, the ones in flight are dropped, and the
same command resumes (finished cells are skipped). It ends with each part's done/pending count.

``--dry-run`` (no device needed) lists every cell of the plan, with its status in the stores, through each
part's own ``--list-cells``, and estimates the plan's time on one H200 from measured figures (:data:`FIGURES`).

    python benchmarks/study_on_gpu.py --data-dir cifar10-jpeg.zip --out results/study --deadline 840
    python benchmarks/study_on_gpu.py --data-dir cifar10-jpeg.zip --out results/study --dry-run
"""

import argparse
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from depthaudit.methods import METHODS

LAMBDAS = ["0", "1e-4", "1e-2", "1e-1"]
TRAIN_SIZE = {"cifar10": 50_000, "cifar100": 50_000, "mnist1d": 8_000}  # training examples (batch 128)
# Measured figures the estimate stands on (docs/benchmarks.md, "Stacked runs" and "CUDA graphs"; one H200,
# torch 2.11.0+cu130, reference ResMLP d=256 L=4, CIFAR-10 batches of 128, bench_batched.py --steps 30):
FIGURES = {
    "graphed_ms": 2.1,  # a graphed stacked step of 15 bp runs (bench_batched.py --graphs)
    "stacked_ms": 11.5,  # the same step eager (bench_batched.py, stacked arm)
    "one_ms": 67.8 / 15,  # one run's eager step, 15 runs one by one (same command)
    "group_runs": 15,  # the group size those two stacked figures are for (a smaller group is not cheaper)
    "side_by_side": 5.6,  # 12 eager processes side by side gave 5.6× the throughput of one (same section)
}
# A launch-bound step costs about its kernel count: aten ops per step relative to bp's 764, from the CPU profile
# (OMP_NUM_THREADS=1 benchmarks/bench_engine.py --epochs 0.01 --chunk 2 --no-peer --methods fa usf frsf brsf kp
# fa-stream dfa ep sb cb --profile 5 --clock cpu; docs/benchmarks.md); a method not listed counts as 1.5.
OPS_VS_BP = {"bp": 1.0, "fa": 848 / 764, "usf": 911 / 764, "frsf": 902 / 764, "brsf": 902 / 764, "kp": 911 / 764,
             "fa-stream": 812 / 764, "dfa": 836 / 764, "ep": 8798 / 764, "sb": 2094 / 764, "cb": 3715 / 764}
EPOCH = re.compile(r"epoch (\d+)/(\d+)")



def _interruptible() -> None:
    """In each child: SIGINT at its default, since this script stops a study with it (a study started in the
    background by a shell would otherwise pass on the shell's ignored SIGINT, and no deadline could stop it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)

def parts(a) -> list[tuple[str, list[str]]]:
    """``(name, depthaudit arguments)`` per process, in priority order."""
    common = ["--dataset", a.dataset, *(["--data-dir", a.data_dir] if a.data_dir else []), "--device", a.device,
              *a.extra.split()]
    out = Path(a.out)
    plan = []
    for label, methods in (("bp-dfa", "bp dfa"), ("ep", "ep"), *((f"{m}-s{s}", f"{m}@{s}") for m in ("sb", "cb")
                                                                 for s in a.seeds)):
        ms, _, seed = methods.partition("@")
        plan.append((f"table1-{label}", ["audit", "--methods", *ms.split(), "--seeds", *([seed] if seed else a.seeds),
                                         "--epochs", str(a.epochs_table1), "--out", str(out / "table1" / label)]))
    for label, methods in (("bp-dfa", "bp dfa"), *((f"{m}-s{s}", f"{m}@{s}") for m in ("sb", "cb") for s in a.seeds)):
        ms, _, seed = methods.partition("@")
        plan.append((f"s5-{label}", ["intervene", "--methods", *ms.split(), "--lambdas", *LAMBDAS,
                                     "--seeds", *([seed] if seed else a.seeds), "--epochs", str(a.epochs_s5),
                                     "--out", str(out / "s5" / label)]))
    for m in ("bp", "fa", "dfa"):  # one store: the ladder's identity leaves out the method list
        plan.append((f"ladder-{m}", ["ladder", "--methods", m, "--d-hidden", "256", "--num-blocks", "4",
                                     "--k_values", "0", "1", "2", "3", "4", "--seeds", *a.seeds,
                                     "--epochs", str(a.epochs_ladder), "--output_dir", str(out / "ladder"),
                                     "--verbose"]))
    chosen = [(n, [*argv[:1], *common, *argv[1:]]) for n, argv in plan
              if not a.only or any(n.startswith(o) for o in a.only)]
    if not chosen:
        sys.exit(f"--only {' '.join(a.only)} matches no part; parts are {', '.join(n for n, _ in plan)}")
    return chosen


def list_cells(cli: list[str], plan, env) -> dict[str, list[tuple[str, str, str]]]:
    """Each part's ``(cell id, done|pending, method)`` from its own ``--list-cells`` (four processes at a time:
    each imports torch, and eighteen at once can exhaust a small machine's memory)."""
    cells, outs = {}, {}
    for i in range(0, len(plan), 4):
        procs = {n: subprocess.Popen([*cli, *argv, "--list-cells"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env) for n, argv in plan[i:i + 4]}
        outs.update({n: (p, *p.communicate()) for n, p in procs.items()})
    for n, (p, out, err) in outs.items():
        if p.returncode:
            sys.exit(f"{n}: --list-cells failed ({err.strip().splitlines()[-1] if err.strip() else p.returncode})")
        cells[n] = [(f[1], f[2], f[3].split(",")[0]) for f in (ln.split("\t") for ln in out.splitlines()) if len(f) > 3]
    return cells


def part_seconds(cells, epochs: int, dataset: str) -> float:
    """One part's estimated seconds on one H200 alone: its pending runs, stacked groups of ≤ 16 in sequence."""
    steps = epochs * math.ceil(TRAIN_SIZE.get(dataset, 50_000) / 128)
    by_method: dict[str, int] = {}
    for _, status, m in cells:
        if status != "done":
            by_method[m] = by_method.get(m, 0) + 1
    total = 0.0
    for m, n in by_method.items():
        cls, ratio = METHODS.get(m), OPS_VS_BP.get(m, 1.5)
        if getattr(cls, "stackable", False):
            per = FIGURES["graphed_ms"] if getattr(cls, "graphable", False) else FIGURES["stacked_ms"]
            for size in [16] * (n // 16) + ([n % 16] if n % 16 else []):  # the CLI's stacked groups
                total += steps * per * ratio * max(size, FIGURES["group_runs"]) / FIGURES["group_runs"] / 1e3
        else:
            total += n * steps * FIGURES["one_ms"] * ratio / 1e3
    return total


def dry_run(a, plan, cli, env) -> None:
    """Print every cell and each part's estimated time, then the plan's."""
    cells = list_cells(cli, plan, env)
    secs = {}
    for n, argv in plan:
        epochs = int(argv[argv.index("--epochs") + 1])
        secs[n] = part_seconds(cells[n], epochs, a.dataset)
        done = sum(s == "done" for _, s, _ in cells[n])
        print(f"{n}: {len(cells[n])} cells ({done} done), {epochs} epochs, ~{secs[n]:.0f} s alone on one H200")
        for cid, status, _ in cells[n]:
            print(f"    {cid}\t{status}")
    total = sum(len(c) for c in cells.values())
    wall = max(max(secs.values()), sum(secs.values()) / FIGURES["side_by_side"])
    print(f"plan: {len(plan)} processes, {total} cells ({sum(s == 'done' for c in cells.values() for _, s, _ in c)} "
          f"done); estimated ~{wall:.0f} s on one H200 (the longest part, or the sum over "
          f"{FIGURES['side_by_side']}x side by side; figures: benchmarks/study_on_gpu.py FIGURES)")


def progress(log: Path) -> str:
    """A part's progress from its log: the ladder's ``epoch e/b`` (``--verbose``), else its last line's end."""
    tail = log.read_text(errors="replace")[-4000:]
    hits = EPOCH.findall(tail)
    if hits:
        return f"epoch {hits[-1][0]}/{hits[-1][1]}"
    lines = [ln.strip() for ln in tail.splitlines()[1:] if ln.strip()]  # line 0: the command
    return lines[-1][-48:] if lines else "starting"


def run(a, plan, cli, env) -> int:
    """Start every part, print progress, interrupt at the deadline; return the number of parts that failed."""
    from depthaudit.data import load_data

    t0, logs = time.monotonic(), Path(a.out) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    load_data(a.dataset, a.data_dir, False, "cpu")  # decoded once into the cache: no part decodes it again
    print(f"[{time.monotonic() - t0:5.0f}s] data cached", flush=True)
    procs = []
    for n, argv in plan:
        log = logs / f"{n}.log"
        with open(log, "w") as f:
            f.write(" ".join([*cli, *argv]) + "\n")
        procs.append((n, subprocess.Popen([*cli, *argv], stdout=open(log, "a"), stderr=subprocess.STDOUT, env=env,
                                          start_new_session=True, preexec_fn=_interruptible), log))
    print(f"[{time.monotonic() - t0:5.0f}s] started {len(procs)} processes on {a.device}", flush=True)
    stopped = False
    while any(p.poll() is None for _, p, _ in procs):
        time.sleep(max(0.2, min(a.status_every, a.deadline - (time.monotonic() - t0))))
        now = time.monotonic() - t0
        line = []
        for n, p, log in procs:
            line.append(f"{n}: {'ended' if p.poll() is not None else progress(log)}")
        print(f"[{now:5.0f}s] " + " | ".join(line), flush=True)
        if now >= a.deadline and not stopped:
            stopped = True
            for n, p, _ in procs:
                if p.poll() is None:
                    print(f"[{now:5.0f}s] deadline: interrupting {n} (finished runs are kept)", flush=True)
                    os.killpg(p.pid, signal.SIGINT)
            break
    failed = 0
    for n, p, _ in procs:
        try:
            p.wait(timeout=a.grace)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        failed += p.returncode not in (0, 130)
        print(f"{n}: exit {p.returncode}", flush=True)
    cells = list_cells(cli, plan, env)
    for n, _ in plan:
        print(f"{n}: {sum(s == 'done' for _, s, _ in cells[n])}/{len(cells[n])} cells done")
    print(f"[{time.monotonic() - t0:5.0f}s] all stopped; rerun the same command to resume", flush=True)
    return failed


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=None, help="the dataset's files (CIFAR-10: the JPEG zip)")
    p.add_argument("--dataset", default="cifar10")
    p.add_argument("--out", required=True, help="the stores' folder (resumable)")
    p.add_argument("--seeds", nargs="+", default=["42", "123", "456"])
    p.add_argument("--epochs-table1", type=int, default=100)
    p.add_argument("--epochs-s5", type=int, default=30)
    p.add_argument("--epochs-ladder", type=int, default=100)
    p.add_argument("--only", nargs="+", default=None, help="parts whose name starts so (table1, s5-cb, ladder-fa)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--extra", default="", help="more flags for every depthaudit process (e.g. '--cuda-graphs off')")
    p.add_argument("--deadline", type=float, default=840.0, help="seconds from start; then interrupt and stop")
    p.add_argument("--grace", type=float, default=30.0, help="seconds an interrupted process has to exit")
    p.add_argument("--status-every", type=float, default=30.0)
    p.add_argument("--dry-run", action="store_true", help="list the cells and the estimated time; train nothing")
    a = p.parse_args()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cli = [sys.executable, "-m", "depthaudit"]
    plan = parts(a)
    if a.dry_run:
        dry_run(a, plan, cli, env)
        return 0
    return 1 if run(a, plan, cli, env) else 0


if __name__ == "__main__":
    sys.exit(main())
