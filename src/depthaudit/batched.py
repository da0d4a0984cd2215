"""Stacked runs: R runs that share an architecture train together as one, in one process.

Runs of one model family and shape — different seeds, different trainable blocks (ladder rungs, the
audit's trained/frozen pair), different random feedback, different scale-penalty λ — are independent,
so they can share every kernel launch. Each parameter is stacked along a leading run dimension,
``(R, *shape)``, and each
module is called under ``torch.func.vmap`` (batched matmuls, no Python loop over runs). The recipe
(``recipe.py``) sees ``Trace.runs = R``: the loss is the sum of the runs' mean losses, so each run's
parameters get exactly their own gradient, and ``rms`` is taken per run. Each run keeps its own data
order (:func:`depthaudit.loop.fit`), augmentation stream, feedback (its method's state, stacked), frozen
mask and tracker.

AdamW is elementwise, so one optimizer over stacked parameters is R independent ones — except that
decoupled weight decay moves a weight whose gradient is zero, so a block frozen in run r would drift.
:class:`MaskedAdamW` therefore applies each update only where the run trains that group; a frozen
block stays bit-identical to its init (tested), as when it trains alone.

**CUDA graphs** (``graphs=True``, ``--cuda-graphs``; CUDA only): on a GPU the stacked step is launch-bound
(a few hundred small kernels, each queued by Python). :class:`StackedStepper` then records the step's forward
and backward (``method.step``) once as a CUDA graph and replays it every step, so the GPU runs those kernels
back to back; the batch gather, augmentation, optimizer and ``after_step`` stay eager around it. The graph
replays the very kernels it recorded, on the same inputs, so a run's numbers are those of the eager step
(tested in tests/test_cuda.py). Only methods with ``graphable = True`` (no host sync, no randomness and no
Python-side state change inside ``step``) are recorded; others train eagerly.

What can stack: a model class with ``stackable = True`` (no buffers) under a method with
``stackable = True``, same config except seed, ``train_blocks`` and λ (:func:`group_key`). Law tests
(tests/test_batched.py): every run of a stacked group equals the same run trained alone, fp64, ≤ 1e-10.
"""

import math
import time
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap
from torch.utils._pytree import tree_flatten, tree_unflatten

from .config import TrainConfig
from .data import DataBundle
from .data.augment import augment_runs
from .errors import UsageError
from .loop import RunOutput, build, check_augment, cpu_fused_adamw, final_record, fit, measure_epoch
from .methods import METHODS, CreditMethod
from .models import MODELS, ResidualModel
from .recipe import Penalty
from .seeds import derive_seed


class _Call(nn.Module):
    """Calls ``inner.<fn>`` so :func:`functional_call` can run any method of a module, not only forward."""

    def __init__(self, inner: nn.Module, fn: str):
        super().__init__()
        self.inner, self.fn = inner, fn

    def forward(self, *args):
        return getattr(self.inner, self.fn)(*args)


class StackedModule(nn.Module):
    """R copies of one module as one: each parameter stacked to (R, *shape), every call vmapped over runs."""

    vmap_on_cpu = False  # the GPU's form on the CPU too (tests keep both forms checked on the CPU)

    def __init__(self, modules: list[nn.Module]):
        super().__init__()
        template = modules[0]
        if any(True for _ in template.buffers()):
            raise UsageError(f"{type(template).__name__} has buffers; it cannot train stacked (use --batch-runs 1)")
        self.names = [n for n, _ in template.named_parameters()]
        per = [dict(m.named_parameters()) for m in modules]
        self.params = nn.ParameterList(
            nn.Parameter(torch.stack([p[n].detach() for p in per]), requires_grad=any(p[n].requires_grad for p in per))
            for n in self.names)
        self.__dict__["template"] = template  # not a submodule: its own parameters are never trained here
        # run r's parameter i requires grad in run r's own model: on the CPU a frozen slice is passed detached,
        # so no run computes a gradient it would not compute alone (the optimizer would drop it anyway)
        self._run_grad = [[bool(p[n].requires_grad) for n in self.names] for p in per]
        self._ids = {id(p): i for i, p in enumerate(template.parameters())}

    def call(self, fn: str, *args, shared: tuple[bool, ...] = ()):
        """``template.<fn>(*args)`` per run; args are (R, …) unless ``shared[i]`` (the same for every run).

        On a GPU one ``vmap`` over the runs (batched kernels: one launch serves R runs). On the CPU, where
        launches cost little and the GEMMs are the step, a loop over the runs instead: each run's slices go
        through the template as an ordinary module, so its products are the plain ``mm`` of a run alone. Under
        ``vmap`` a ``Linear``'s weight gradient comes out transposed, as (R, in, out), and is copied into the
        parameter's (R, out, in) layout — a cache-hostile transposing copy of every stacked weight that cost
        the CPU more than the products themselves (``benchmarks/bench_batched.py``).
        """
        mod = _Call(self.template, fn)
        is_shared = [i < len(shared) and shared[i] for i in range(len(args))]
        if self.params[0].device.type != "cpu" or self.vmap_on_cpu:
            params = {f"inner.{n}": p for n, p in zip(self.names, self.params, strict=True)}
            dims = tuple(None if sh else 0 for sh in is_shared)
            return vmap(lambda ps, *a: functional_call(mod, ps, a), in_dims=(0, *dims))(params, *args)
        runs = self.params[0].shape[0]
        per = [p.unbind(0) for p in self.params]  # R views of each stacked parameter (one backward node each)
        flat = [None if sh else tree_flatten(a) for a, sh in zip(args, is_shared, strict=True)]
        split = [None if f is None else [t.unbind(0) for t in f[0]] for f in flat]  # every leaf is (R, …)
        outs = []
        for r in range(runs):
            ps = {f"inner.{n}": v[r] if rg else v[r].detach()
                  for n, v, rg in zip(self.names, per, self._run_grad[r], strict=True)}
            a = [arg if f is None else tree_unflatten([t[r] for t in sp], f[1])
                 for arg, f, sp in zip(args, flat, split, strict=True)]
            outs.append(functional_call(mod, ps, tuple(a)))
        leaves, specs = zip(*(tree_flatten(o) for o in outs), strict=True)
        return tree_unflatten([torch.stack(ls) for ls in zip(*leaves, strict=True)], specs[0])

    def forward(self, x: torch.Tensor, shared: bool = False) -> torch.Tensor:
        """The module on (R, B, …) inputs, or on one (B, …) input shared by all runs."""
        return self.call("forward", x, shared=(shared,))

    def forward_cached(self, x: torch.Tensor):
        """The block's forward and its VJP cache, per run."""
        return self.call("forward_cached", x)

    def fa_vjp(self, cache, g: torch.Tensor, fb: dict[str, torch.Tensor]) -> torch.Tensor:
        """The feedback VJP per run, each run with its own feedback slice of ``fb``."""
        return self.call("fa_vjp", cache, g, fb)

    def feedback_weights(self) -> dict[str, torch.Tensor]:
        """The stacked (R, out, in) versions of the template's feedback weights."""
        return {k: self.params[self._ids[id(w)]] for k, w in self.template.feedback_weights().items()}

    @torch.no_grad()
    def write_back(self, modules: list[nn.Module], runs: list[int] | None = None) -> None:
        """Copy run r's slice into ``modules[r]`` (every run, or those in ``runs``)."""
        for r in range(len(modules)) if runs is None else runs:
            for n, p in zip(self.names, self.params, strict=True):
                dict(modules[r].named_parameters())[n].copy_(p[r])


class StackedModel(ResidualModel):
    """R models of one architecture: ``embed → blocks → readout``, each a :class:`StackedModule`."""

    def __init__(self, models: list[ResidualModel]):
        super().__init__()
        self.runs = len(models)
        self.embed = StackedModule([m.embed for m in models])
        self.blocks = nn.ModuleList(StackedModule([m.blocks[i] for m in models]) for i in range(len(models[0].blocks)))
        self.readout = StackedModule([m.readout for m in models])
        if hasattr(models[0], "feature_dim"):
            self.feature_dim = models[0].feature_dim

    def forward(self, x: torch.Tensor, shared: bool = False) -> torch.Tensor:
        """Logits (R, B, C) from (R, B, …) inputs, or from one (B, …) input every run sees."""
        return self.readout(self.stream(self.embed(x, shared=shared))[-1])

    def write_back(self, models: list[ResidualModel], runs: list[int] | None = None) -> None:
        """Copy each run's parameters into its own model."""
        for m in [self.embed, *self.blocks, self.readout]:
            name = "embed" if m is self.embed else "readout" if m is self.readout else None
            own = [mm.embed if name == "embed" else mm.readout if name == "readout"
                   else mm.blocks[list(self.blocks).index(m)] for mm in models]
            m.write_back(own, runs)


class MaskedAdamW:
    """AdamW over stacked parameters, each update applied only to the runs that train its group.

    The arithmetic is torch's AdamW step (its multi-tensor form: one ``_foreach`` kernel per operation over
    every parameter, instead of nine per parameter), elementwise, so run r's slice follows exactly the update
    it would get from its own ``torch.optim.AdamW`` (tested in fp64). The mask is applied as a lerp with weight
    1 (take the update: ``end − (end − p)·0`` = the update exactly) or 0 (keep ``p`` exactly), per run.

    On the CPU each ``_foreach`` operation is a pass over every stacked parameter (R times a run's, far larger
    than the caches), so the step is memory-bound there: it runs instead as torch's fused AdamW kernel over the
    per-run slices ``p[r]`` of the runs that train the group — one pass per slice, the frozen slices never read,
    as each run's own optimizer would do (``benchmarks/bench_batched.py``; tested in fp64 like the other form).
    """

    def __init__(self, groups: list[tuple[list[nn.Parameter], torch.Tensor]], lr: float, weight_decay: float,
                 betas=(0.9, 0.999), eps: float = 1e-8):
        self.groups = [(ps, mask) for ps, mask in groups if ps]
        self.lr, self.wd, self.betas, self.eps, self.t = lr, weight_decay, betas, eps, 0
        self.params = [p for ps, _ in self.groups for p in ps]
        self.state = {id(p): (torch.zeros_like(p), torch.zeros_like(p)) for p in self.params}
        # (R, *shape) per parameter: 1.0 where run r trains its group, else 0.0 (materialised: foreach needs
        # tensors of the parameter's own shape)
        self.weights = {id(p): mask.view(-1, *[1] * (p.dim() - 1)).to(p.dtype).expand_as(p).contiguous()
                        for ps, mask in self.groups for p in ps}
        self.fused = bool(self.params) and all(p.device.type == "cpu" for p in self.params) and cpu_fused_adamw()
        # the runs that train each parameter's group (fixed for the optimizer's life); read once, here
        self.train_runs = {id(p): [r for r, on in enumerate(mask.tolist()) if on] for ps, mask in self.groups
                           for p in ps} if self.fused else {}
        self._step_t = torch.zeros((), dtype=torch.float32)  # the fused kernel reads t from a tensor

    def zero_grad(self) -> None:
        """Drop every gradient."""
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        """One AdamW step per run where the run trains the group; elsewhere nothing moves."""
        self.t += 1
        b1, b2 = self.betas
        bc1, bc2 = 1 - b1**self.t, 1 - b2**self.t
        ps = [p for p in self.params if p.grad is not None]
        if not ps:
            return
        if self.fused:
            self._fused_step(ps, b1, b2)
            return
        grads = [p.grad for p in ps]
        avg = [self.state[id(p)][0] for p in ps]
        avg_sq = [self.state[id(p)][1] for p in ps]
        new = torch._foreach_mul(ps, 1 - self.lr * self.wd)
        torch._foreach_lerp_(avg, grads, 1 - b1)
        torch._foreach_mul_(avg_sq, b2)
        torch._foreach_addcmul_(avg_sq, grads, grads, value=1 - b2)
        denom = torch._foreach_sqrt(avg_sq)
        torch._foreach_div_(denom, math.sqrt(bc2))
        torch._foreach_add_(denom, self.eps)
        torch._foreach_addcdiv_(new, avg, denom, value=-self.lr / bc1)
        torch._foreach_lerp_(ps, new, [self.weights[id(p)] for p in ps])

    def _fused_step(self, ps: list[nn.Parameter], b1: float, b2: float) -> None:
        """The CPU form: one fused AdamW pass over each trained run's slice ``p[r]`` (views: updated in place)."""
        sl: tuple[list, list, list, list] = ([], [], [], [])
        for p in ps:
            runs = self.train_runs[id(p)]
            if runs:
                avg, avg_sq = self.state[id(p)]
                for out, t in zip(sl, (p, p.grad, avg, avg_sq), strict=True):
                    views = t.unbind(0)  # R views of (*shape)
                    out.extend(views[r] for r in runs)
        if sl[0]:
            self._step_t.fill_(self.t)
            torch._fused_adamw_(*sl, [], [self._step_t] * len(sl[0]), amsgrad=False, lr=self.lr, beta1=b1, beta2=b2,
                                weight_decay=self.wd, eps=self.eps, maximize=False, grad_scale=None, found_inf=None)


def group_key(cfg: TrainConfig) -> str | None:
    """What runs must share to train stacked (their config but seed, ``train_blocks`` and λ); None if they can't."""
    if cfg.optimizer != "adamw":  # MaskedAdamW is AdamW only: sgd runs train one by one
        return None
    method, model = METHODS.get(cfg.method), MODELS.get(cfg.arch)
    if not (getattr(method, "stackable", False) and getattr(model, "stackable", False)):
        return None
    if cfg.warm_start or cfg.credit_mix is not None or cfg.warmup is not None:
        return None
    d = replace(cfg, seed=0, train_blocks="all", scale_penalty=0.0, penalty_form="abs",
                penalty_reduction="example").to_dict()
    if cfg.scale_penalty > 0:  # λ = 0 resets form and reduction to their canonical values: penalised runs keep theirs
        d |= {"penalty_form": cfg.penalty_form, "penalty_reduction": cfg.penalty_reduction}
    return repr(sorted(d.items()))


def graphed(graphs: bool, device, method: str) -> bool:
    """Whether a stacked step of ``method`` on ``device`` is replayed as a CUDA graph when ``graphs`` asks for it."""
    return bool(graphs) and torch.device(device).type == "cuda" and getattr(METHODS.get(method), "graphable", False)


class StackedStepper:
    """One optimisation step of R stacked runs under the recipe (the stacked :class:`train.Stepper`)."""

    WARMUP = 3  # eager steps before the graph is recorded (they set up cuBLAS and autograd state on its stream)

    def __init__(self, cfgs: list[TrainConfig], data: DataBundle, models: list[ResidualModel],
                 methods: list[CreditMethod], graphs: bool = False):
        cfg = cfgs[0]
        self.cfg, self.data, self.runs = cfg, data, len(cfgs)
        if cfg.optimizer != "adamw":  # group_key never stacks such runs; a direct caller is told why
            raise UsageError(f"stacked runs train with AdamW only (MaskedAdamW); --optimizer {cfg.optimizer} runs "
                             "train one by one (leave --batch-runs off)")
        check_augment(cfg, data)
        self.model = StackedModel(models)
        device = data.x_train.device
        # (R,) per group: run r trains it when every parameter of that group requires grad in run r
        self.trains = {g: torch.tensor([bool(m.groups()[g]) and all(p.requires_grad for p in m.groups()[g])
                                        for m in models], device=device) for g in models[0].groups()}
        stacked_groups = self.model.groups()
        self.opt = MaskedAdamW([([p for p in stacked_groups[g] if p.requires_grad], self.trains[g])
                                for g in stacked_groups], cfg.lr, cfg.weight_decay)
        self.method = type(methods[0]).stack(methods, self.model, self.trains)
        lams = [c.scale_penalty for c in cfgs]  # λ may differ per run (the intervention's grid)
        # the form and reduction of the penalised runs (a λ = 0 config carries the canonical ones, not the sweep's)
        kinds = {(c.penalty_form, c.penalty_reduction) for c in cfgs if c.scale_penalty > 0} or {("abs", "example")}
        if len(kinds) > 1:
            raise ValueError(f"stacked runs with different penalty forms/reductions {sorted(kinds)}; stack one each")
        (form, reduction), = kinds
        self.penalty = Penalty(max(lams), form, torch.tensor(lams, dtype=data.x_train.dtype, device=device), reduction)
        self.aug_gens = [torch.Generator(device=device).manual_seed(derive_seed(c.seed, "augment")) for c in cfgs]
        self.graphs = graphed(graphs, device, cfg.method)
        self._graphs: dict[tuple, tuple] = {}  # batch shape -> (graph, its x, its y, its loss, its gradients)
        self._warm: dict[tuple, int] = {}  # batch shape -> eager steps taken before recording it
        self._stream = None  # the stream graphs are recorded on (and their warm-up steps run on)

    def __call__(self, idx: torch.Tensor, lr: float) -> torch.Tensor:
        """Train run r on rows ``idx[r]`` (idx (R, B)); returns the (R,) batch mean losses on the device."""
        self.opt.lr = lr
        x = self.data.x_train[idx]  # (R, B, …)
        x = augment_runs(x, self.cfg.augment, self.data.pad_value, self.aug_gens)  # each run its own stream
        y = self.data.y_train[idx]  # (R, B)
        if self.graphs:
            loss = self._graphed(x, y)
        else:
            self.opt.zero_grad()
            loss = self.method.step(self.model, x, y, self.penalty)
        self.opt.step()
        self.method.after_step(self.model, lr, self.cfg.weight_decay)
        return loss

    def _graphed(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``method.step`` on (x, y), replayed from a CUDA graph recorded for this batch shape.

        One graph per batch shape (an epoch's last batch is smaller). A shape is first stepped eagerly on the
        graphs' stream — WARMUP times before the first graph (cuBLAS and autograd set up their state there),
        once before each later one — and recorded at its next occurrence. A recording is made with every
        ``.grad`` unset, so its backward allocates the gradients in its graph's memory pool and each replay
        rewrites them in place; after a replay the parameters' ``.grad`` are pointed at that graph's gradients
        (an eager step or another graph may have pointed them elsewhere). The optimizer reads them eagerly.
        """
        key = (tuple(x.shape), tuple(y.shape))
        rec = self._graphs.get(key)
        if rec is None:
            if self._stream is None:
                self._stream = torch.cuda.Stream(device=x.device)
            main = torch.cuda.current_stream(x.device)
            self._stream.wait_stream(main)
            if self._warm.get(key, 0) < (1 if self._graphs else self.WARMUP):
                self._warm[key] = self._warm.get(key, 0) + 1
                with torch.cuda.stream(self._stream):
                    self.opt.zero_grad()
                    loss = self.method.step(self.model, x, y, self.penalty)
                main.wait_stream(self._stream)
                return loss
            self.opt.zero_grad()
            xs, ys = x.clone(), y.clone()  # the graph's inputs: each step copies its batch in
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=self._stream):
                loss = self.method.step(self.model, xs, ys, self.penalty)
            rec = self._graphs[key] = (graph, xs, ys, loss, [p.grad for p in self.opt.params])
        else:
            rec[1].copy_(x)
            rec[2].copy_(y)
        graph, _, _, loss, grads = rec
        graph.replay()  # recording runs nothing: the first replay is that step
        for p, g in zip(self.opt.params, grads, strict=True):
            p.grad = g
        return loss.clone()  # the graph's own output is rewritten by its next replay


@torch.no_grad()
def evaluate_stacked(model: StackedModel, x: torch.Tensor, y: torch.Tensor, batch: int = 1000):
    """Per-run (mean loss, accuracy) lists over ``x``, which every run sees; one host sync."""
    runs = model.runs
    loss = torch.zeros(runs, device=x.device)
    correct = torch.zeros(runs, device=x.device, dtype=torch.long)
    for i in range(0, x.shape[0], batch):
        logits, yb = model(x[i:i + batch], shared=True), y[i:i + batch]  # (R, b, C)
        loss += F.cross_entropy(logits.float().flatten(0, 1), yb.repeat(runs), reduction="none").view(runs, -1).sum(1)
        correct += (logits.argmax(-1) == yb).sum(1)
    n = y.numel()
    return (loss / n).tolist(), (correct.double() / n).tolist()  # sync point: once per evaluation


def train_stacked(cfgs: list[TrainConfig], data: DataBundle, log=None, trackers=None,
                  monitors=None, watches=None, graphs: bool = False) -> list[RunOutput]:
    """Train R runs stacked; returns what :func:`depthaudit.loop.train` would return for each, in order.

    Every run is built exactly as when it trains alone (same init, same feedback), stacked, trained by
    :func:`depthaudit.loop.fit`, and written back into its own model and method, which the trackers read
    (at init, and after each epoch the schedule measures) and the results keep. ``graphs``: replay each
    step's forward and backward as a CUDA graph (see the module's docstring; ignored off CUDA).
    """
    log = log or (lambda m: None)
    runs = len(cfgs)
    keys = {group_key(c) for c in cfgs}
    if None in keys or len(keys) != 1 or len({c.epochs_run for c in cfgs}) != 1:
        raise UsageError("these runs cannot train stacked (different shapes, budgets or a method that does not "
                         "stack); use --batch-runs 1")
    trackers, monitors, watches = trackers or [None] * runs, monitors or [None] * runs, watches or [None] * runs
    if any(m is not None and m.stop_on_flag for m in monitors):
        raise UsageError("--stop-on-flag ends runs at different epochs; train them one by one (--batch-runs 1)")
    built = [build(c, data) for c in cfgs]
    models, methods = [b[0] for b in built], [b[1] for b in built]
    x0, y0 = data.x_train[:2], data.y_train[:2]
    for m, meth in zip(models, methods, strict=True):
        meth.measure_credits(m, x0, y0)  # draws any lazily drawn feedback (DFA, fa-stream) before it is stacked
    t0 = time.perf_counter()
    last_epoch = cfgs[0].epochs_run
    init_measurement = [t(0, m, meth, last_epoch == 0) if t else None
                  for t, m, meth in zip(trackers, models, methods, strict=True)]
    stepper = StackedStepper(cfgs, data, models, methods, graphs=graphs)
    done: set[int] = set()

    def end_of(r: int):
        def on_epoch_end(epoch: int, rec: dict, diverged: bool) -> str | None:
            if trackers[r]:  # run r's state, written back into its own model and method, for its tracker
                stepper.model.write_back(models, [r])
                stepper.method.unstack(methods, [r])
            status = measure_epoch(trackers[r], monitors[r], log, epoch, models[r], methods[r], rec, diverged,
                                   last_epoch, cfgs[r].epochs, who=f"run {r} ")
            if diverged or status:  # keep its state as it stopped; the others go on
                stepper.model.write_back(models, [r])
                stepper.method.unstack(methods, [r])
                done.add(r)
            if watches[r] is not None:
                watches[r].epoch(rec)
            return status
        return on_epoch_end

    histories, statuses = fit(data.x_train.shape[0], cfgs[0].batch_size, cfgs[0].epochs, cfgs[0].lr,
                              [c.seed for c in cfgs], torch.device(cfgs[0].device), stepper,
                              lambda: evaluate_stacked(stepper.model, data.x_test, data.y_test),
                              last_epoch=last_epoch, on_epoch_end=[end_of(r) for r in range(runs)], log=log,
                              budget_note=f"[{runs} stacked] ")
    rest = [r for r in range(runs) if r not in done]
    stepper.model.write_back(models, rest)
    stepper.method.unstack(methods, rest)
    seconds = (time.perf_counter() - t0) / runs  # the group's time, shared
    outs = []
    for r, c in enumerate(cfgs):
        history, status = histories[r], statuses[r]
        final = final_record(history, status, c.epochs)
        outs.append(RunOutput(status, history, final, seconds, models[r], methods[r], init_measurement[r],
                              monitors[r].to_dict() if monitors[r] is not None else None))
    return outs
