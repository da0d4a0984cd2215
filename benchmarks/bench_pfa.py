"""Product FA's step, the engine's kept product against the rule written out, beside BP and FA (CIFAR-10 ResMLP).

The kept product updates ``M ← c·M + QQᵀU``; the rule written out forms ``M = Q·P`` and updates ``P ← c·P + QᵀU``
every step. The arms train interleaved in one process from the same draws.

    python benchmarks/bench_pfa.py --data-dir ../shared/data/cifar10/cifar10-jpeg.zip --epochs 0.25 --clock cpu
"""

import argparse
import sys
import time
from pathlib import Path

import torch

from depthaudit.config import TrainConfig
from depthaudit.data import load_data
from depthaudit.loop import Stepper, build
from depthaudit.methods.pfa import ProductFA

sys.path.insert(0, str(Path(__file__).parent))
from bench_engine import interleaved_times  # noqa: E402


class Literal(ProductFA):
    """The rule as the paper writes it: the product formed at every use, ``P`` updated through ``Qᵀ`` every step."""

    def matrix(self, key, weight):
        return (self.expansion[key] @ self.feedback[key]).view_as(weight)

    @torch.no_grad()
    def after_step(self, model, lr=0.0, weight_decay=0.0):
        for k, prev in self._prev.items():
            u = self._weights[k].detach().flatten(1) - prev + lr * weight_decay * prev  # (out, in)
            self.feedback[k].mul_(1 - lr * weight_decay).add_(self.expansion[k].mT @ u)
        self._prev = {}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default="../shared/data/cifar10/cifar10-jpeg.zip", help="CIFAR-10 folder or .zip")
    p.add_argument("--epochs", type=float, default=0.25, help="epochs' worth of steps per arm")
    p.add_argument("--chunk", type=int, default=10, help="steps per interleaved chunk")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="cpu: this process's CPU time (a busy shared machine; use one thread)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="cpu, cuda or cuda:N")
    a = p.parse_args()
    data = load_data("cifar10", a.data_dir, False, torch.device(a.device))
    base = dict(dataset="cifar10", epochs=1, device=a.device, augment="none")
    steppers = {}
    for arm in ("bp", "fa", "pfa", "pfa-literal"):
        c = TrainConfig(method=arm.split("-")[0], **base)
        model, method = build(c, data)
        if arm == "pfa-literal":
            method = Literal(model, method.seed).to(a.device)
        steppers[arm] = Stepper(c, data, model, method)
    clock = time.process_time if a.clock == "cpu" else time.perf_counter
    times, total, _, _ = interleaved_times(steppers, data, TrainConfig(**base), a.epochs, a.chunk, a.device, clock)
    # the two pfa arms start from the same draws: after the same steps their feedback must agree
    kept, lit = steppers["pfa"].method, steppers["pfa-literal"].method
    diff = max((kept.matrix(k, w) - lit.matrix(k, w)).abs().max().item() for k, w in kept._weights.items())
    print(f"cifar10 ResMLP d=256 L=4, {total} steps of batch 128 per arm, device {a.device}, torch "
          f"{torch.__version__}, {torch.get_num_threads()} threads, {a.clock} clock")
    for k, v in times.items():
        print(f"  {k:12s} {v:7.2f}s  ({v / total * 1e3:6.2f} ms/step)  {v / times['bp']:.2f}x bp")
    print(f"  pfa-literal / pfa = {times['pfa-literal'] / times['pfa']:.2f}; feedback M after the same steps: "
          f"max |kept − literal| {diff:.1e}")


if __name__ == "__main__":
    main()
