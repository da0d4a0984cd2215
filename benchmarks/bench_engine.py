"""Engine speed: CIFAR-10 ResMLP steps under every method vs BP, vs a bare PyTorch BP loop and vs the GEMMs alone.

All arms train side by side in this one process on the same data and batch size: the bare loops, the GEMM
floor, the engine's step under each method of ``--methods`` (default: BP, the FA family — fa, usf, frsf, brsf,
kp, fa-stream — and DFA) and, when biotorch is importable, the peer: biotorch 0.0.16's FA and DFA converting the
same ResMLP, trained by a plain loop with the same optimizer (``--no-peer`` leaves it out). To keep a noisy
shared machine from favouring whichever ran during a quiet spell, they advance in interleaved chunks
(``--chunk`` steps each, round-robin, order rotated every round) until each has done ``--epochs`` epochs'
worth of steps; each arm's chunk times are summed and the ratios printed. ``--profile N`` then profiles N
steps of each arm (torch.profiler: calls and self CPU time of the step's heaviest ops).

    python benchmarks/bench_engine.py --data-dir ../shared/data/cifar10/cifar10-jpeg.zip
"""

import argparse
import math
import time

import torch
import torch.nn.functional as F

from depthaudit.config import TrainConfig
from depthaudit.data import load_data
from depthaudit.loop import Stepper, build, cosine_lr, make_optimizer
from depthaudit.models import build_model
from depthaudit.seeds import derive_seed


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


class Peer(Bare):
    """biotorch 0.0.16's ``mode`` ("fa" or "dfa") converting the same ResMLP (same init): its own one backward.

    biotorch's FA layer sends ``g·B`` to its input and ``gᵀx`` to its weight — inside a block too, so its
    first Linear learns from the feedback-carried gradient (depthaudit's recipe keeps each block's own backward
    exact, SPEC §2). Its DFA broadcasts the loss gradient to every layer. Same optimizer as the ``bare`` arm.
    """

    def __init__(self, cfg, data, mode: str):
        from biotorch.module.biomodule import BioModule

        super().__init__(cfg, data)
        fused = self.opt.defaults["fused"]  # the bare arm's choice (the converted layers carry frozen B's)
        self.net = BioModule(self.model, mode=mode, output_dim=data.num_classes if mode == "dfa" else None)
        self.model = self.net.module
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, fused=fused)
        self.mode = mode

    def __call__(self, idx, lr):
        for g in self.opt.param_groups:
            g["lr"] = lr
        self.opt.zero_grad(set_to_none=True)
        x, y = self.data.x_train[idx], self.data.y_train[idx]
        out = self.net(x, y, F.cross_entropy) if self.mode == "dfa" else self.net(x)
        loss = F.cross_entropy(out, y)
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

    ``feedback=True`` (the ``gemm-fa`` arm): FA's floor under the recipe — the same products plus, for every
    ``Linear`` after the embedding, the feedback product ``dY B`` that carries the credit down beside the
    layer's exact input gradient (the block's own backward stays exact, so FA cannot drop ``dY W``).
    """

    def __init__(self, model, x, feedback: bool = False):
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
        self.flops = sum(6 * n * i * o for n, i, o in shapes) + (2 * sum(n * i * o for n, i, o in shapes[1:])
                                                                 if feedback else 0)
        self.feedback = feedback

    def __call__(self, idx, lr):
        for k, (x, w, dy) in enumerate(self.ops):
            x @ w.T  # forward (n, out)
            dy @ w  # input gradient (n, in)
            dy.T @ x  # weight gradient (out, in)
            if self.feedback and k:
                dy @ w  # the feedback product dY B (B shaped like W)


def interleaved_times(steppers: dict, data, cfg, epochs: float, chunk: int, device: str, clock=time.perf_counter):
    """Advance every stepper over the same batches in interleaved chunks (order rotated each round).

    Returns ``(seconds per stepper, steps each, the batches, steps per epoch)``; 3 warm-up steps are untimed.
    ``clock``: wall time (default), or ``time.process_time`` — the CPU time this process spent, which other
    processes' load does not inflate (with one thread: no time spent spinning in a thread pool).
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
            t0 = clock()
            for i in range(done, done + k):
                steppers[name](batches[i], cosine_lr(cfg.lr, i, total))
            sync()
            times[name] += clock() - t0
        done += k
        rnd += 1
    return times, total, batches, per_epoch


FA_FAMILY = ("fa", "usf", "frsf", "brsf", "kp", "fa-stream")
TARGETS = {"fa": 1.00, **dict.fromkeys(FA_FAMILY[1:], 1.05), "dfa": 1.05}  # method / BP, the targets


def profile(steppers: dict, batches, lr: float, steps: int, top: int = 8) -> None:
    """torch.profiler over ``steps`` steps of each arm: matrix products per step and the heaviest ops' self time."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as prof

    print(f"  profile, {steps} steps per arm (torch.profiler, CPU; calls are per step, self time ms per step):")
    for name, s in steppers.items():
        with prof(activities=[ProfilerActivity.CPU]) as p:
            for i in range(steps):
                s(batches[i % len(batches)], lr)
        ev = p.key_averages()
        mm = {e.key: e.count // steps for e in ev if e.key in ("aten::mm", "aten::addmm", "aten::bmm")}
        heavy = sorted((e for e in ev if e.key.startswith("aten::")), key=lambda e: -e.self_cpu_time_total)[:top]
        total = sum(e.self_cpu_time_total for e in ev) / steps / 1e3
        ops = sum(e.count for e in ev if e.key.startswith("aten::")) // steps
        print(f"    {name:9s} {total:6.2f} ms self, {ops:4d} aten ops/step, products "
              + " ".join(f"{k[6:]}×{v}" for k, v in mm.items()) + " | "
              + ", ".join(f"{e.key[6:]} {e.self_cpu_time_total / steps / 1e3:.2f}×{e.count // steps}" for e in heavy))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="cifar10")
    p.add_argument("--data-dir", default="../shared/data/cifar10/cifar10-jpeg.zip")
    p.add_argument("--d-hidden", type=int, default=256)
    p.add_argument("--num-blocks", type=int, default=4)
    p.add_argument("--epochs", type=float, default=1.0, help="epochs' worth of steps per configuration")
    p.add_argument("--chunk", type=int, default=25, help="steps per interleaved chunk")
    p.add_argument("--methods", nargs="+", default=["bp", *FA_FAMILY, "dfa"], help="engine arms (bp is always one)")
    p.add_argument("--no-peer", action="store_true", help="leave out biotorch's FA and DFA arms")
    p.add_argument("--generic", action="store_true", help="also time fa on its generic path (one-backward off)")
    p.add_argument("--profile", type=int, default=0, metavar="N", help="then profile N steps of each arm")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="cpu: time each chunk by this process's CPU time (a busy shared machine; use one thread)")
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
    steppers["gemm-fa"] = Gemm(steppers["bare"].model, data.x_train[:cfg.batch_size], feedback=True)
    methods = ["bp", *(m for m in a.methods if m != "bp")]
    for m in methods:
        c = TrainConfig(method=m, **base)
        steppers[m] = Stepper(c, data, *build(c, data))
    if a.generic:
        c = TrainConfig(method="fa", **base)
        steppers["fa/gen"] = Stepper(c, data, *build(c, data))
        steppers["fa/gen"].method.fast = False
    c = TrainConfig(method="bp", **base)
    steppers["unscaled"] = Stepper(c, data, build(c, data)[0], Unscaled())
    peers = []
    if not a.no_peer:
        try:
            for mode in ("fa", "dfa"):
                steppers[f"bio-{mode}"] = Peer(cfg, data, mode)
                peers.append(f"bio-{mode}")
        except ImportError:
            print("  (biotorch not importable: no peer arm; pip install --no-deps biotorch==0.0.16)")
    clock = time.process_time if a.clock == "cpu" else time.perf_counter
    times, total, batches, _ = interleaved_times(steppers, data, cfg, a.epochs, a.chunk, a.device, clock)
    bs = cfg.batch_size
    print(f"{a.dataset} ResMLP d={a.d_hidden} L={a.num_blocks}, {total} steps of batch {bs} per configuration "
          f"({a.epochs:g} epoch), interleaved in chunks of {a.chunk}; device {a.device}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, {a.clock} clock")
    g, bp = times["gemm"], times["bp"]
    for k, v in times.items():
        vs = f"  {v / bp:.3f}x bp" if not k.startswith("gemm") else ""
        print(f"  {k:9s} {v:7.2f}s  ({v / total * 1e3:5.2f} ms/step)  {v / g:5.2f}x floor{vs}")
    print(f"  GEMM floor: {steppers['gemm'].flops / (g / total) / 1e9:.1f} GFLOP/s on a BP step's matrix products")
    fl = steppers["gemm-fa"].flops / steppers["gemm"].flops
    print(f"  FA's floor / BP's floor = {times['gemm-fa'] / g:.3f} ({fl:.3f} in FLOPs): the least FA / BP can be "
          f"with exact local gradients (the recipe) and FLOP-bound products")
    print(f"  BP / bare = {bp / times['bare']:.3f}   (target <= 1.05)  = engine (unscaled / bare) "
          f"{times['unscaled'] / times['bare']:.3f} x recipe rescale (bp / unscaled) "
          f"{bp / times['unscaled']:.3f}")
    print(f"  BP / textbook = {bp / times['textbook']:.3f}   (a bare loop with torch's default AdamW: "
          f"bare / textbook {times['bare'] / times['textbook']:.3f})")
    for m in methods[1:]:
        t = TARGETS.get(m)
        verdict = "" if t is None else f"(target <= {t:.2f}: {'met' if times[m] / bp <= t else 'MISSED'})"
        print(f"  {m.upper() + ' / BP':14s} = {times[m] / bp:.3f}   {verdict}")
    for k in peers:  # the peer against its own bare loop (same optimizer), the engine's ratio beside it
        m = k[4:]
        mine = f"; depthaudit {m.upper()} / BP {times[m] / bp:.3f}" if m in times else ""
        print(f"  peer {k} / bare = {times[k] / times['bare']:.3f}{mine} (BP / bare {bp / times['bare']:.3f})")
    if a.profile:
        profile({k: v for k, v in steppers.items() if k not in ("textbook", "unscaled", "gemm-fa")}, batches, cfg.lr,
                a.profile)
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
