"""Cost of CIFAR augmentation on the device (crop with 4-px padding + flip) per training epoch.

Two measurements in one process: (1) BP training steps of the reference ResMLP with ``--augment none``
and ``crop+flip``, interleaved in chunks (order rotated every round) so machine noise hits both alike;
(2) ``augment_batch`` alone over one epoch of batches. Target: augmentation ≤ 5 % of an epoch.

    python benchmarks/bench_augment.py --data-dir ../shared/data/cifar10/cifar10-jpeg.zip
"""

import argparse
import time

import torch
from bench_engine import interleaved_times  # benchmarks/ is on sys.path when run as a script

from depthaudit.config import TrainConfig
from depthaudit.data import load_data
from depthaudit.data.augment import augment_batch
from depthaudit.loop import Stepper, build


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default="../shared/data/cifar10/cifar10-jpeg.zip")
    p.add_argument("--method", default="bp")
    p.add_argument("--epochs", type=float, default=1.0, help="epochs' worth of steps per configuration")
    p.add_argument("--chunk", type=int, default=25)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = p.parse_args()
    data = load_data("cifar10", a.data_dir, False, torch.device(a.device))
    steppers = {}
    for aug in ("none", "crop+flip"):
        c = TrainConfig(dataset="cifar10", method=a.method, augment=aug, device=a.device)
        steppers[aug] = Stepper(c, data, *build(c, data))
    cfg = TrainConfig(dataset="cifar10", device=a.device)
    times, total, batches, per_epoch = interleaved_times(steppers, data, cfg, a.epochs, a.chunk, a.device)
    bs = cfg.batch_size
    sync = torch.cuda.synchronize if a.device.startswith("cuda") else (lambda: None)
    g = torch.Generator(device=a.device).manual_seed(0)
    sync()
    t0 = time.perf_counter()
    for idx in batches[:per_epoch]:
        augment_batch(data.x_train[idx], "crop+flip", data.pad_value, g)
    sync()
    alone = time.perf_counter() - t0
    print(f"CIFAR-10 reference ResMLP d=256 L=4, {a.method}, {total} steps of batch {bs} per configuration, "
          f"interleaved in chunks of {a.chunk}; device {a.device}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads")
    for k, v in times.items():
        print(f"  augment {k:9s} {v:7.2f}s  ({v / total * 1e3:.1f} ms/step)")
    print(f"  crop+flip / none = {times['crop+flip'] / times['none']:.3f}   (target <= 1.05)")
    print(f"  augment_batch alone: {alone:.2f}s per epoch = {100 * alone / (times['none'] * per_epoch / total):.1f}% "
          "of an un-augmented epoch")


if __name__ == "__main__":
    main()
