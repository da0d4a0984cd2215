"""Cost of the audit's per-epoch tracking: the same training with and without the tracker, side by side.

    python benchmarks/bench_tracking.py --epochs 5 --repeats 3

Interleaves the two variants for each method over ``--repeats`` rounds in one process and reports
the minimum per variant and the ratio (target <= 1.05).
"""

import argparse
import time

import torch

from depthaudit.config import TrainConfig
from depthaudit.data import load_data
from depthaudit.diagnostics import audit_tracker
from depthaudit.loop import build, train
from depthaudit.runner import probe_batches


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="mnist1d")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--methods", nargs="+", default=["bp", "fa", "dfa"])
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--probe-batches", type=int, default=10)
    p.add_argument("--probe-batch-size", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    data = load_data(a.dataset, a.data_dir, False, torch.device("cpu"))
    batches = probe_batches(data, 42, a.probe_batches, a.probe_batch_size)
    print(f"{a.dataset} ResMLP d=256 L=4, {a.epochs} epochs, probe {len(batches)}x{a.probe_batch_size}, "
          f"torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, min of {a.repeats}")
    for m in a.methods:
        cfg = TrainConfig(dataset=a.dataset, method=m, epochs=a.epochs, augment="none")
        t = {"plain": [], "tracked": []}
        for _ in range(a.repeats):
            for kind in t:
                tracker = audit_tracker(batches) if kind == "tracked" else None
                t0 = time.perf_counter()
                train(cfg, data, log=lambda s: None, tracker=tracker)
                t[kind].append(time.perf_counter() - t0)
        plain, tracked = min(t["plain"]), min(t["tracked"])
        # the same cost, measured directly: one measurement's median time against one plain epoch
        model, method = build(cfg, data)
        tr = audit_tracker(batches)
        calls = []
        for _ in range(7):
            t0 = time.perf_counter()
            tr(1, model, method)
            calls.append(time.perf_counter() - t0)
        per = sorted(calls)[3]
        predicted = 1 + per * (a.epochs + 1) / plain
        print(f"  {m:4s} plain {plain:6.2f}s  tracked {tracked:6.2f}s  ratio {tracked / plain:.3f}  |  "
              f"{per * 1e3:.0f} ms per measurement x {a.epochs + 1} -> predicted ratio {predicted:.3f}"
              "  (target <= 1.05)")


if __name__ == "__main__":
    main()
