"""The published protocol's ladder (and the intervention) on one GPU: one process per stacked group, a deadline.

On a GPU the reference ResMLP is launch-bound (a stacked step of 15 runs is a few hundred small kernels), so
one process leaves the device mostly idle. This runs one ``depthaudit`` process per (shape, method) — each
trains its method's whole ladder group (k = 0..L × seeds) stacked, then its shallow-baseline group — side by
side on the one device, all writing into the same resumable stores (the ladder's identity excludes the
method list, so the processes cooperate). Every ``--status-every`` seconds it prints each process's epoch.
At ``--deadline`` seconds it interrupts them (finished runs are kept, runs in flight discarded: rerun the
same script to resume). With ``--shed``, a process whose group in flight is
projected (from its epochs so far) to miss the deadline is interrupted early, to give the others the device.

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
    p.add_argument("--shapes", nargs="+", default=["256x4", "512x2"], help="d×L of each ladder, in priority order")
    p.add_argument("--methods", nargs="+", default=["bp", "fa-stream", "dfa", "fa"])
    p.add_argument("--seeds", nargs="+", default=["42", "123", "456"])
    p.add_argument("--epochs", default="100")
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
                   "--seeds", *a.seeds, "--epochs", a.epochs, "--device", a.device, "--shallow-baseline",
                   "--verbose", "--output_dir", a.out]
            jobs.append((name, prio, cmd))
    if a.intervene_out:
        for i, part in enumerate(a.intervene_parts):
            out = f"{a.intervene_out}/part{i}"
            cmd = [*cli, "intervene", "--dataset", "cifar10", "--data-dir", a.data_dir, *part.split(),
                   "--seeds", "42", "--epochs", a.intervene_epochs, "--device", a.device, "--out", out]
            jobs.append((f"intervene_part{i}", len(a.shapes), cmd))
    procs = []
    for name, prio, cmd in jobs:
        log = logs / f"{name}.log"
        f = open(log, "w")
        f.write(" ".join(cmd) + "\n")
        f.flush()
        procs.append((name, prio, subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env,
                                                   start_new_session=True), log, time.monotonic()))
    print(f"[{time.monotonic() - t0:5.0f}s] started {len(procs)} processes on {a.device}", flush=True)

    def progress(log: Path):
        hits = EPOCH.findall(log.read_text(errors="replace")[-4000:])
        return (int(hits[-1][0]), int(hits[-1][1]), float(hits[-1][2])) if hits else (0, 0, 0.0)

    def interrupt(entry, why):
        name, _, proc, _, _ = entry
        if proc.poll() is None:
            print(f"[{time.monotonic() - t0:5.0f}s] interrupting {name}: {why}", flush=True)
            os.killpg(proc.pid, signal.SIGINT)

    shed = set()
    while any(pr.poll() is None for _, _, pr, _, _ in procs):
        time.sleep(min(a.status_every, max(1.0, a.deadline - (time.monotonic() - t0))))
        now = time.monotonic() - t0
        line = []
        for name, _, proc, log, _ in procs:
            e, b, _ = progress(log)
            line.append(f"{name}:{'done' if proc.poll() is not None else f'{e}/{b}'}")
        print(f"[{now:5.0f}s] " + "  ".join(line), flush=True)
        if now >= a.deadline:
            for entry in procs:
                interrupt(entry, "deadline")
            break
        if a.shed and now > 120:  # a group that cannot finish in time only slows the others: stop it
            for entry in procs:
                name, _, pr, log, _ = entry
                e, b, secs = progress(log)
                if pr.poll() is None and e >= 3 and name not in shed:
                    projected = now + secs / e * (b - e)  # this group's remaining epochs at its pace so far
                    if projected > a.deadline * 1.15:
                        shed.add(name)
                        interrupt(entry, f"projected to finish its group at {projected:.0f}s, past the deadline")
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
