"""Engine speed: one CIFAR-10 epoch of ResMLP under BP, FA, DFA vs a bare hand-written PyTorch BP loop.

All four run side by side in this one process, interleaved over ``--repeats`` rounds; the minimum per
configuration is reported (the least-disturbed measurement on a shared machine) and the ratios printed.

    python benchmarks/bench_engine.py --data-dir ../shared/data/cifar10/cifar10-jpeg.zip
"""

import argparse
import math
import time

import torch
import torch.nn.functional as F

from depthaudit.config import TrainConfig, derive_seed
from depthaudit.data import load_data
from depthaudit.models import build_model
from depthaudit.train import evaluate, train


def bare_epoch(cfg: TrainConfig, data) -> float:
    """Textbook loop: one AdamW, cosine per step, loss.backward(); same model, batch size, shuffling."""
    t0 = time.perf_counter()
    model = build_model(cfg.arch, data.input_shape, data.num_classes, cfg.d_hidden, cfg.num_blocks,
                        cfg.mlp_ratio, cfg.seed).to(cfg.device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    n, bs = data.x_train.shape[0], cfg.batch_size
    steps = math.ceil(n / bs)
    gen = torch.Generator(device=cfg.device).manual_seed(derive_seed(cfg.seed, "shuffle"))
    perm = torch.randperm(n, device=cfg.device, generator=gen)
    for i in range(steps):
        idx = perm[i * bs:(i + 1) * bs]
        for g in opt.param_groups:
            g["lr"] = cfg.lr * 0.5 * (1 + math.cos(math.pi * i / steps))
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(data.x_train[idx]), data.y_train[idx]).backward()
        opt.step()
    evaluate(model, data.x_test, data.y_test)
    if cfg.device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def our_epoch(cfg: TrainConfig, data) -> float:
    """One epoch of depthaudit's own loop (includes its per-epoch evaluation, like the bare loop)."""
    t0 = time.perf_counter()
    train(cfg, data, log=lambda m: None)
    if cfg.device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="cifar10")
    p.add_argument("--data-dir", default="../shared/data/cifar10/cifar10-jpeg.zip")
    p.add_argument("--d-hidden", type=int, default=256)
    p.add_argument("--num-blocks", type=int, default=4)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = p.parse_args()
    data = load_data(a.dataset, a.data_dir, False, torch.device(a.device))
    base = dict(dataset=a.dataset, d_hidden=a.d_hidden, num_blocks=a.num_blocks, epochs=1, device=a.device)
    runs = {"bare": lambda: bare_epoch(TrainConfig(**base), data)}
    for m in ("bp", "fa", "dfa"):
        runs[m] = lambda m=m: our_epoch(TrainConfig(method=m, **base), data)
    times = {k: [] for k in runs}
    for r in range(a.repeats):
        for k, fn in runs.items():
            times[k].append(fn())
            print(f"round {r + 1}: {k:5s} {times[k][-1]:7.2f}s", flush=True)
    best = {k: min(v) for k, v in times.items()}
    print(f"\n{a.dataset} ResMLP d={a.d_hidden} L={a.num_blocks}, one epoch, device {a.device}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads, min of {a.repeats}")
    for k, v in best.items():
        print(f"  {k:5s} {v:7.2f}s")
    print(f"  BP / bare = {best['bp'] / best['bare']:.3f}   (target <= 1.05)")
    print(f"  FA / BP   = {best['fa'] / best['bp']:.3f}   (target <= 1.15; biotorch 1.17)")
    print(f"  DFA / BP  = {best['dfa'] / best['bp']:.3f}   (target <= 1.05; biotorch 1.15)")


if __name__ == "__main__":
    main()
