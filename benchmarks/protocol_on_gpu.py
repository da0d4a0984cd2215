"""The published protocol's ladder (and the intervention) on one GPU: one process per stacked group, a deadline.

On a GPU the reference ResMLP is launch-bound (a stacked step of 15 runs is a few hundred small kernels), so
one process leaves the device mostly idle. This runs one ``depthaudit`` process per (shape, method) — each
trains its method's whole ladder group (k = 0..L × seeds) stacked, then its shallow-baseline group — side by
side on the one device, all writing into the same resumable stores (the ladder's identity excludes the
method list, so the processes cooperate). Every ``--status-every`` seconds it prints each process's epoch.
At ``--deadline`` seconds it interrupts them (finished runs are kept, runs in flight discarded: rerun the
same script to resume). With ``--shed``, processes are stopped one at a time, lowest priority first (the
intervention, then the ladder's methods from last to first), whenever a higher-priority ladder group is
projected — at its pace over the last minute — to miss the deadline: on a launch-bound device each process
stopped speeds up the others, and a group that would miss anyway only costs them time.

    python benchmarks/protocol_on_gpu.py --data-dir cifar10-jpeg.zip --out docs/results/ladder_e100 \\
        --intervene-out docs/results/intervene_e30 --deadline 3600
"""

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

EPOCH = re.compile(r"epoch (\d+)/(\d+)[^\[\n]*\[([\d.]+)s\]")  # epoch e/budget … [seconds since the fit began]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", required=True)
    p.add_argument("--out", required=True, help="the ladder stores' folder")
    p.add_argument("--shapes", nargs="*", default=["256x4", "512x2"], help="d×L of each ladder, in priority order")
    p.add_argument("--methods", nargs="+", default=["bp", "fa-stream", "dfa", "fa"])
    p.add_argument("--seeds", nargs="+", default=["42", "123", "456"])
    p.add_argument("--epochs", default="100")
    p.add_argument("--extra", default="",
                   help="more flags for every depthaudit process (e.g. --extra='--cuda-graphs off')")
    p.add_argument("--chain", action="store_true", help="one process per method: its next shape's group starts when "
                   "the previous one ends, if that group (timed as long as the last) can end by the deadline")
    p.add_argument("--k-values", nargs="+", default=None, help="rungs k (default: the ladder's, 0..L)")
    p.add_argument("--no-shallow", action="store_true", help="skip the parameter-matched shallow baseline")
    p.add_argument("--intervene-out", default=None, help="also run the intervention (30 epochs) into this folder")
    p.add_argument("--intervene-parts", nargs="+", default=["--methods bp dfa fa-stream", "--methods sb",
                   "--methods cb --lambdas 0 1e-4", "--methods cb --lambdas 1e-2 1e-1"],
                   help="one intervene process per entry, each into OUT/partN (stackable methods together)")
    p.add_argument("--intervene-epochs", default="30")
    p.add_argument("--device", default="cuda")
    p.add_argument("--deadline", type=float, default=1e9, help="seconds from start; then interrupt and stop")
    p.add_argument("--status-every", type=float, default=30)
    p.add_argument("--shed", action="store_true", help="interrupt a process whose group cannot finish by the deadline")
    p.add_argument("--logs", default="logs")
    a = p.parse_args()
    t0 = time.monotonic()
    logs = Path(a.logs)
    logs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cli = [sys.executable, "-m", "depthaudit"]
    # decode the data once, so the processes below all read the cache instead of decoding 60k JPEGs each
    subprocess.run([sys.executable, "-c", "import sys; from depthaudit.data import load_data; "
                    "load_data('cifar10', sys.argv[1], False, 'cpu')", a.data_dir], check=True, env=env)
    print(f"[{time.monotonic() - t0:5.0f}s] data cached", flush=True)
    jobs = []  # (name, priority, Popen, log path)
    for prio, shape in enumerate(a.shapes):
        d, L = shape.split("x")
        for m in a.methods:
            name = f"ladder_d{d}_L{L}_{m}"
            cmd = [*cli, "ladder", "--data-dir", a.data_dir, "--d-hidden", d, "--num-blocks", L, "--methods", m,
                   "--seeds", *a.seeds, "--epochs", a.epochs, "--device", a.device, "--verbose",
                   "--output_dir", a.out, *([] if a.no_shallow else ["--shallow-baseline"]),
                   *(["--k_values", *a.k_values] if a.k_values else []), *a.extra.split()]
            after = f"ladder_d{a.shapes[prio - 1].replace('x', '_L')}_{m}" if a.chain and prio else None
            jobs.append((name, prio, cmd, after))
    if a.intervene_out:
        for i, part in enumerate(a.intervene_parts):
            out = f"{a.intervene_out}/part{i}"
            cmd = [*cli, "intervene", "--dataset", "cifar10", "--data-dir", a.data_dir, *part.split(),
                   "--seeds", "42", "--epochs", a.intervene_epochs, "--device", a.device, "--out", out,
                   *a.extra.split()]
            jobs.append((f"intervene_part{i}", len(a.shapes), cmd, None))
    procs = []  # (name, priority, Popen, log path, start time), in priority order

    def start(name, prio, cmd):
        log = logs / f"{name}.log"
        f = open(log, "w")
        f.write(" ".join(cmd) + "\n")
        f.flush()
        procs.append((name, prio, subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env,
                                                   start_new_session=True), log, time.monotonic()))
        procs.sort(key=lambda en: [j[0] for j in jobs].index(en[0]))

    waiting = [j for j in jobs if j[3] is not None]
    for name, prio, cmd, after in jobs:
        if after is None:
            start(name, prio, cmd)
    print(f"[{time.monotonic() - t0:5.0f}s] started {len(procs)} processes on {a.device}", flush=True)

    def start_chained():
        for job in list(waiting):
            name, prio, cmd, after = job
            prev = next((en for en in procs if en[0] == after), None)
            if prev is None or prev[2].poll() is None:
                continue
            waiting.remove(job)
            took = time.monotonic() - prev[4]
            if prev[2].returncode == 0 and time.monotonic() - t0 + took < a.deadline:
                print(f"[{time.monotonic() - t0:5.0f}s] {after} ended in {took:.0f}s: starting {name}", flush=True)
                start(name, prio, cmd)
            else:
                print(f"[{time.monotonic() - t0:5.0f}s] not starting {name}: {after} ended "
                      f"(exit {prev[2].returncode}) after {took:.0f}s, too late for the deadline", flush=True)

    def progress(log: Path):
        hits = EPOCH.findall(log.read_text(errors="replace")[-4000:])
        return (int(hits[-1][0]), int(hits[-1][1]), float(hits[-1][2])) if hits else (0, 0, 0.0)

    def interrupt(entry, why):
        name, _, proc, _, _ = entry
        if proc.poll() is None:
            print(f"[{time.monotonic() - t0:5.0f}s] interrupting {name}: {why}", flush=True)
            os.killpg(proc.pid, signal.SIGINT)

    samples: dict[str, list] = {}  # name -> [(wall time, epoch, budget)] from each status line

    def pace_finish(name: str, now: float) -> float | None:
        """Projected finish (script seconds) of ``name``'s group in flight, at its pace over the last ~60 s."""
        hist = [h for h in samples.get(name, []) if h[1] > 0]
        if len(hist) < 2:
            return None
        old = next((h for h in hist if h[0] >= now - 60), hist[0])
        if old is hist[-1]:
            old = hist[-2]
        (t1, e1, _), (t2, e2, b) = old, hist[-1]
        return None if e2 <= e1 else t2 + (t2 - t1) / (e2 - e1) * (b - e2)

    last_shed = 0.0
    while any(pr.poll() is None for _, _, pr, _, _ in procs) or waiting:
        start_chained()
        time.sleep(min(a.status_every, max(1.0, a.deadline - (time.monotonic() - t0))))
        now = time.monotonic() - t0
        line = []
        for name, _, proc, log, _ in procs:
            e, b, _ = progress(log)
            samples.setdefault(name, []).append((now, e, b))
            line.append(f"{name}:{'done' if proc.poll() is not None else f'{e}/{b}'}")
        print(f"[{now:5.0f}s] " + "  ".join(line), flush=True)
        if now >= a.deadline:
            for entry in procs:
                interrupt(entry, "deadline")
            break
        if a.shed and now - last_shed > 60:
            live = [en for en in procs if en[2].poll() is None]
            late = [(en[0], f) for en in live if en[0].startswith("ladder")
                    for f in [pace_finish(en[0], now)] if f is not None and f > a.deadline - 15]
            if late and len(live) > 1:
                victim = live[-1]  # lowest priority still running (jobs were started in priority order)
                last_shed = now
                interrupt(victim, f"{late[0][0]} projected to finish at {late[0][1]:.0f}s, past the deadline")
    for name, _, proc, _, _ in procs:
        try:
            proc.wait(timeout=max(5.0, 30 - (time.monotonic() - t0 - a.deadline)))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        print(f"{name}: exit {proc.returncode}", flush=True)
    print(f"[{time.monotonic() - t0:5.0f}s] all stopped", flush=True)


if __name__ == "__main__":
    main()
