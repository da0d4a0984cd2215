"""Runs per hour, one by one vs stacked, for one method's ladder group (k = 0..L × seeds) of the reference ResMLP.

Both engines train the same runs on the same CIFAR-shaped batches in one process, interleaved in chunks
(order rotated every round) so machine noise hits both alike: "one by one" is R ordinary
:class:`depthaudit.loop.Stepper` s stepped in turn (what ``--batch-runs 1`` does inside one worker);
"stacked" is one :class:`depthaudit.batched.StackedStepper` over all R runs (what ``--batch-runs R`` does).
Reported: seconds per step of all R runs, the ratio, and the projected runs per hour at 100 epochs.

    python benchmarks/bench_batched.py                      # bp, k = 0..4 × 3 seeds = 15 runs, d=256 L=4
    python benchmarks/bench_batched.py --method fa --steps 60 --data-dir ../shared/data/cifar10/cifar10-jpeg.zip
"""

import argparse
import math
import time
from dataclasses import replace

import torch

from depthaudit.batched import StackedStepper
from depthaudit.config import TrainConfig
from depthaudit.data import load_data
from depthaudit.data.base import DataBundle
from depthaudit.loop import Stepper, build, cosine_lr


def cifar_shaped(device: str, n: int = 50000) -> DataBundle:
    """Random data of CIFAR-10's shape (3×32×32, 10 classes) when no copy is given."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n + 1000, 3, 32, 32, generator=g)
    y = torch.randint(0, 10, (n + 1000,), generator=g)
    return DataBundle("cifar-shaped", x[:n].to(device), y[:n].to(device), x[n:].to(device), y[n:].to(device), 10,
                      "random", "0" * 64, pad_value=torch.zeros(3, device=device))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--method", default="bp")
    p.add_argument("--d-hidden", type=int, default=256)
    p.add_argument("--num-blocks", type=int, default=4)
    p.add_argument("--seeds", type=int, nargs="+", default=[42, 123, 456])
    p.add_argument("--steps", type=int, default=40, help="timed steps per engine (each step trains all R runs)")
    p.add_argument("--chunk", type=int, default=10)
    p.add_argument("--augment", default="crop+flip")
    p.add_argument("--data-dir", default=None, help="a CIFAR-10 copy (default: random CIFAR-shaped tensors)")
    p.add_argument("--graphs", action="store_true", help="also time the stacked step replayed as a CUDA graph")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = p.parse_args()
    data = load_data("cifar10", a.data_dir, False, torch.device(a.device)) if a.data_dir else cifar_shaped(a.device)
    base = TrainConfig(dataset="cifar10", method=a.method, d_hidden=a.d_hidden, num_blocks=a.num_blocks,
                       augment=a.augment, device=a.device)
    L = a.num_blocks
    rungs = ["none" if k == 0 else f"last:{k}" for k in range(L + 1)]
    cfgs = [replace(base, seed=s, train_blocks=tb) for tb in rungs for s in a.seeds]
    runs = len(cfgs)
    alone = [Stepper(c, data, *build(c, data)) for c in cfgs]
    built = [build(c, data) for c in cfgs]
    for (m, meth) in built:
        meth.measure_credits(m, data.x_train[:2], data.y_train[:2])
    stacked = StackedStepper(cfgs, data, [b[0] for b in built], [b[1] for b in built])
    bs, n = base.batch_size, data.x_train.shape[0]
    gen = torch.Generator(device=a.device).manual_seed(0)
    batches = [torch.stack([torch.randperm(n, device=a.device, generator=gen)[:bs] for _ in range(runs)])
               for _ in range(a.steps + 2)]  # (R, B) per step
    sync = torch.cuda.synchronize if a.device.startswith("cuda") else (lambda: None)

    def one_by_one(i):
        for r, s in enumerate(alone):
            s(batches[i][r], cosine_lr(base.lr, i, a.steps))

    def together(i):
        stacked(batches[i], cosine_lr(base.lr, i, a.steps))

    engines = {"one by one": one_by_one, "stacked": together}
    if a.graphs:
        built_g = [build(c, data) for c in cfgs]
        for (m, meth) in built_g:
            meth.measure_credits(m, data.x_train[:2], data.y_train[:2])
        graphed = StackedStepper(cfgs, data, [b[0] for b in built_g], [b[1] for b in built_g], graphs=True)
        engines["graphed"] = lambda i: graphed(batches[i], cosine_lr(base.lr, i, a.steps))
    for f in engines.values():  # warm-up, untimed (the graphed step records its graph on its 4th call)
        for _ in range(StackedStepper.WARMUP + 2):
            f(a.steps)
    times, done, rnd = dict.fromkeys(engines, 0.0), 0, 0
    names = list(engines)
    while done < a.steps:
        k = min(a.chunk, a.steps - done)
        for name in names[rnd % len(names):] + names[:rnd % len(names)]:
            sync()
            t0 = time.perf_counter()
            for i in range(done, done + k):
                engines[name](i)
            sync()
            times[name] += time.perf_counter() - t0
        done, rnd = done + k, rnd + 1
    per_epoch = math.ceil(n / bs)
    dev = torch.cuda.get_device_name() if a.device.startswith("cuda") else f"cpu ({torch.get_num_threads()} threads)"
    print(f"# {a.method}: {runs} runs (k = 0..{L} × seeds {a.seeds}), ResMLP d={a.d_hidden} L={L}, batch {bs}, "
          f"augment {a.augment}, {dev}, torch {torch.__version__}, {a.steps} timed steps each")
    for name, t in times.items():
        step = t / a.steps
        hours_per_run = step * per_epoch * 100 / runs / 3600  # wall hours per run at 100 epochs
        print(f"{name:>11}: {step * 1000:8.1f} ms per step of all {runs} runs  → {1 / hours_per_run:7.1f} runs/hour "
              f"at 100 epochs")
    print(f"stacked / one by one speed-up: {times['one by one'] / times['stacked']:.2f}×")
    if "graphed" in times:
        print(f"graphed / stacked speed-up: {times['stacked'] / times['graphed']:.2f}×; graphed / one by one: "
              f"{times['one by one'] / times['graphed']:.2f}×")


if __name__ == "__main__":
    main()
