"""Engine speed: CIFAR-10 ResMLP steps under BP, FA, DFA vs a bare PyTorch BP loop and vs the GEMMs alone.

All four train side by side in this one process on the same data and batch size. To keep a noisy
shared machine from favouring whichever ran during a quiet spell, they advance in interleaved chunks
(``--chunk`` steps each, round-robin, order rotated every round) until each has done ``--epochs``
epochs' worth of steps; each configuration's chunk times are summed and the ratios printed.

    python benchmarks/bench_engine.py --data-dir ../shared/data/cifar10/cifar10-jpeg.zip
"""

import argparse
import math
import time

import torch
import torch.nn.functional as F

from depthaudit.config import TrainConfig, derive_seed
from depthaudit.data import load_data
from depthaudit.loop import Stepper, build, cosine_lr, make_optimizer
from depthaudit.models import build_model


class Bare:
    """Hand-written loop: one AdamW, cosine per step, ``loss.backward()``; same model and batch size.

    ``textbook=False`` (the ``bare`` arm): the same AdamW implementation the engine picks (``make_optimizer``:
    fused on the CPU), so BP / bare is the engine's and the recipe's overhead alone. ``textbook=True``: torch's
    default AdamW for the device (a Python loop over parameters on the CPU), what a plain script would use.
    """

    def __init__(self, cfg, data, textbook: bool = False):
        self.data = data
        self.model = build_model(cfg.arch, data.input_shape, data.num_classes, cfg.d_hidden, cfg.num_blocks,
                                 cfg.mlp_ratio, cfg.seed).to(cfg.device)
        kw = {} if textbook else {"fused": make_optimizer(self.model, cfg).defaults["fused"]}
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, **kw)

    def __call__(self, idx, lr):
        for g in self.opt.param_groups:
            g["lr"] = lr
        self.opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.model(self.data.x_train[idx]), self.data.y_train[idx])
        loss.backward()
        self.opt.step()
        return loss.detach()


class Unscaled:
    """The engine's step without the recipe: BP's plain ``loss.backward()`` inside the same :class:`Stepper`.

    Splits BP / bare into the engine's own cost (``unscaled`` / bare: lr setting, zero_grad, dispatch) and the
    recipe's (bp / ``unscaled``: the per-block ``1/(B·rms)`` rescale of each trainable block's credit).
    """

    def step(self, model, x, y, penalty=None):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        return loss.detach()

    def after_step(self, model, lr=0.0, weight_decay=0.0):
        pass


class Gemm:
    """The floor: only the model's matrix multiplications of one BP step, nothing else.

    For every ``nn.Linear`` of the model (in forward order, at the batch's row count: tokens × batch for token
    models) the forward ``X Wᵀ`` and the two backward products ``dY W`` (input gradient) and ``dYᵀ X`` (weight
    gradient) on preallocated tensors of the right shapes. No elementwise work, no optimizer, no Python beyond
    the loop: what a step could cost if the engine added nothing to its GEMMs.
    """

    def __init__(self, model, x):
        shapes = []

        def hook(mod, inp, out):
            shapes.append((inp[0].reshape(-1, inp[0].shape[-1]).shape[0], mod.in_features, mod.out_features))

        hs = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, torch.nn.Linear)]
        with torch.no_grad():
            model(x)
        for h in hs:
            h.remove()
        gen = torch.Generator(device=x.device).manual_seed(0)
        mk = lambda *s: torch.randn(*s, generator=gen, device=x.device)  # noqa: E731
        self.ops = [(mk(n, i), mk(o, i), mk(n, o)) for n, i, o in shapes]  # X (n, in), W (out, in), dY (n, out)
        self.flops = sum(6 * n * i * o for n, i, o in shapes)

    def __call__(self, idx, lr):
        for x, w, dy in self.ops:
            x @ w.T  # forward (n, out)
            dy @ w  # input gradient (n, in)
            dy.T @ x  # weight gradient (out, in)


def interleaved_times(steppers: dict, data, cfg, epochs: float, chunk: int, device: str):
    """Advance every stepper over the same batches in interleaved chunks (order rotated each round).

    Returns ``(seconds per stepper, steps each, the batches, steps per epoch)``; 3 warm-up steps are untimed.
    """
    n, bs = data.x_train.shape[0], cfg.batch_size
    per_epoch = math.ceil(n / bs)
    total = int(per_epoch * epochs)
    gen = torch.Generator(device=device).manual_seed(derive_seed(cfg.seed, "shuffle"))
    perm = torch.randperm(n, device=device, generator=gen)
    batches = [perm[(i % per_epoch) * bs:(i % per_epoch + 1) * bs] for i in range(total)]
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    for s in steppers.values():  # warm-up (allocator, kernels), not timed
        for i in range(3):
            s(batches[i], cfg.lr)
    times = dict.fromkeys(steppers, 0.0)
    names, done, rnd = list(steppers), 0, 0
    while done < total:
        k = min(chunk, total - done)
        r = rnd % len(names)
        for name in names[r:] + names[:r]:
            sync()
            t0 = time.perf_counter()
            for i in range(done, done + k):
                steppers[name](batches[i], cosine_lr(cfg.lr, i, total))
            sync()
            times[name] += time.perf_counter() - t0
        done += k
        rnd += 1
    return times, total, batches, per_epoch


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="cifar10")
    p.add_argument("--data-dir", default="../shared/data/cifar10/cifar10-jpeg.zip")
    p.add_argument("--d-hidden", type=int, default=256)
    p.add_argument("--num-blocks", type=int, default=4)
    p.add_argument("--epochs", type=float, default=1.0, help="epochs' worth of steps per configuration")
    p.add_argument("--chunk", type=int, default=25, help="steps per interleaved chunk")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--plot", metavar="PNG", help="also draw each arm's step time against the GEMM floor here")
    a = p.parse_args()
    data = load_data(a.dataset, a.data_dir, False, torch.device(a.device))
    # augmentation off: this compares the engine with a bare loop (benchmarks/bench_augment.py times augmentation)
    base = dict(dataset=a.dataset, d_hidden=a.d_hidden, num_blocks=a.num_blocks, epochs=1, device=a.device,
                augment="none")
    cfg = TrainConfig(**base)
    steppers = {"bare": Bare(cfg, data), "textbook": Bare(cfg, data, textbook=True)}
    steppers["gemm"] = Gemm(steppers["bare"].model, data.x_train[:cfg.batch_size])
    for m in ("bp", "fa", "dfa"):
        c = TrainConfig(method=m, **base)
        steppers[m] = Stepper(c, data, *build(c, data))
    c = TrainConfig(method="bp", **base)
    steppers["unscaled"] = Stepper(c, data, build(c, data)[0], Unscaled())
    times, total, _, _ = interleaved_times(steppers, data, cfg, a.epochs, a.chunk, a.device)
    bs = cfg.batch_size
    print(f"{a.dataset} ResMLP d={a.d_hidden} L={a.num_blocks}, {total} steps of batch {bs} per configuration "
          f"({a.epochs:g} epoch), interleaved in chunks of {a.chunk}; device {a.device}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads")
    for k, v in times.items():
        print(f"  {k:8s} {v:7.2f}s  ({v / total * 1e3:.1f} ms/step)")
    g = times["gemm"]
    print(f"  GEMM floor: {steppers['gemm'].flops / (g / total) / 1e9:.1f} GFLOP/s on the step's matrix products")
    arms = ("bare", "unscaled", "bp", "fa", "dfa")
    print("  distance to the GEMM floor: " + ", ".join(f"{k} {times[k] / g:.2f}x" for k in arms))
    print(f"  BP / bare = {times['bp'] / times['bare']:.3f}   (target <= 1.05)  = engine (unscaled / bare) "
          f"{times['unscaled'] / times['bare']:.3f} x recipe rescale (bp / unscaled) "
          f"{times['bp'] / times['unscaled']:.3f}")
    print(f"  BP / textbook = {times['bp'] / times['textbook']:.3f}   (a bare loop with torch's default AdamW: "
          f"bare / textbook {times['bare'] / times['textbook']:.3f})")
    print(f"  FA / BP   = {times['fa'] / times['bp']:.3f}   (target <= 1.15; biotorch 1.17)")
    print(f"  DFA / BP  = {times['dfa'] / times['bp']:.3f}   (target <= 1.05; biotorch 1.15)")
    if a.plot:
        threads = torch.get_num_threads()
        title = (f"{a.dataset} ResMLP d={a.d_hidden} L={a.num_blocks}, batch {bs}, {a.device} ({threads} threads), "
                 f"torch {torch.__version__}, {total} steps per arm, interleaved")
        plot(times, total, title, a.plot)
        print(f"  figure: {a.plot}")


ARMS = [  # (arm, label) bottom to top of the figure
    ("dfa", "DFA step (engine + recipe)"),
    ("fa", "FA step (engine + recipe)"),
    ("bp", "BP step (engine + recipe)"),
    ("unscaled", "engine, plain backward (no recipe)"),
    ("textbook", "bare loop, torch's default AdamW"),
    ("bare", "bare loop, the engine's AdamW"),
    ("gemm", "the step's matrix products alone"),
]


def plot(times: dict, steps: int, title: str, path: str) -> None:
    """Horizontal bars of ms per step, each split into the GEMM floor and the rest, labelled ×floor."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ms = {k: times[k] / steps * 1e3 for k, _ in ARMS}
    floor = ms["gemm"]
    fig, ax = plt.subplots(figsize=(8.5, 3.6))
    for i, (k, _) in enumerate(ARMS):
        ax.barh(i, min(floor, ms[k]), color="#9db4cf")
        if k != "gemm":
            ax.barh(i, ms[k] - floor, left=floor, color="#d98c5f" if k in ("bp", "fa", "dfa") else "#b9b9b9")
        ax.text(ms[k] + 0.05, i, f"{ms[k]:.2f} ms  ({ms[k] / floor:.2f}× floor)", va="center", fontsize=8)
    ax.axvline(floor, color="#3a5a80", lw=1, ls="--")
    ax.set_yticks(range(len(ARMS)), [label for _, label in ARMS], fontsize=8)
    ax.set_xlim(0, max(ms.values()) * 1.35)
    ax.set_xlabel("ms per training step (blue: the GEMM floor; the rest: everything else)")
    ax.set_title(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


if __name__ == "__main__":
    main()
