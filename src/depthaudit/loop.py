"""The training loop: data on the device, ``randperm`` shuffles, one sync per epoch."""

import json
import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
import torch.nn.functional as F

from . import progress
from .config import TrainConfig
from .data import DATASETS, DataBundle
from .data.augment import augment_batch
from .data.base import sha256_file
from .diagnostics.base import MEASUREMENT_KEY
from .errors import ConfigError, UsageError
from .methods import CreditMethod, build_method, parse_method_spec
from .methods.warmup import Warmup
from .models import ResidualModel, build_model
from .optim import (
    OPTIMIZERS,
    cpu_fused_adamw,  # noqa: F401  (its home before --optimizer; batched.py reads it here)
)
from .recipe import Penalty
from .seeds import derive_seed


@dataclass
class RunOutput:
    """What one run produced (the CLI adds provenance and writes it)."""

    status: str  # "ok" | "diverged" | "stopped_flagged"
    history: list[dict]
    final: dict
    seconds: float
    model: ResidualModel = field(repr=False)
    method: CreditMethod = field(repr=False)
    init_measurement: dict | None = None  # tracker measurements at initialisation (epoch 0)
    monitor: dict | None = None  # the first epoch each D1/D2 check fired (see diagnostics.Monitor)


def _finite(v: float) -> float | None:
    return v if math.isfinite(v) else None


@torch.no_grad()
def evaluate(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 1000, loss_fn=None):
    """(mean loss, accuracy) over ``x`` in eval mode; one host sync at the end.

    ``loss_fn(logits, y)`` is a mean loss (e.g. per token for a language model); default: cross-entropy.
    Accuracy counts ``argmax(-1) == y`` over every label (every token for a language model).
    """
    was_training = model.training
    model.eval()
    loss = torch.zeros((), device=x.device)
    correct = torch.zeros((), device=x.device, dtype=torch.long)
    for i in range(0, x.shape[0], batch):
        logits, yb = model(x[i:i + batch]), y[i:i + batch]
        if loss_fn is None:
            loss += F.cross_entropy(logits.float(), yb, reduction="sum")
        else:
            loss += loss_fn(logits, yb).float() * yb.numel()
        correct += (logits.argmax(-1) == yb).sum()
    model.train(was_training)
    n = y.numel()
    return (loss / n).item(), correct.item() / n  # sync point: once per evaluation


def make_optimizer(model: ResidualModel, cfg: TrainConfig) -> torch.optim.Optimizer:
    """One independent AdamW per trainable group (embed, each trainable block, readout), as one param group.

    AdamW's update and state are per parameter, so one optimizer over every trainable group is the same
    optimizer per group (tested bit for bit against separate objects), at one multi-tensor pass per step
    instead of one per group. Growth adds an inserted block's parameters as a group of their own.

    On the CPU it is torch's fused AdamW (one kernel per parameter for the whole update), where the default
    would be a Python loop of ~10 ops per parameter: the same update to rounding (``tests/test_train.py``),
    a CIFAR-10 step 17–19 % shorter (``benchmarks/bench_engine.py``). On a GPU, torch's default (multi-tensor).
    With ``cfg.optimizer = "sgd"``, torch's SGD with momentum instead (:mod:`depthaudit.optim`).
    """
    params = [p for ps in model.groups().values() if ps and all(p.requires_grad for p in ps) for p in ps]
    return OPTIMIZERS.get(cfg.optimizer)(params, cfg.lr, cfg.weight_decay)


def read_checkpoint(path: str) -> dict:
    """A depthaudit ``checkpoint.pt`` (weights only); a corrupt or foreign file is one line naming it."""
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # the user's file: corrupt, truncated or not a checkpoint at all
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0].split(". ")[0][:100]
        raise UsageError(f"--warm-start {path}: not a readable checkpoint ({first}); give the checkpoint.pt "
                         "a depthaudit run wrote") from None
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("model"), dict):
        raise UsageError(f"--warm-start {path}: holds no model weights; give a depthaudit checkpoint.pt")
    beside = _record_beside(Path(path))  # (walk 14 case 100: the weights of one run read as another's)
    if beside is not None:
        sealed = beside.get("checkpoint_sha256")
        if beside["config"] != _as_json(ckpt.get("config")) or (sealed and sealed != sha256_file(Path(path))):
            raise UsageError(f"--warm-start {path}: is not the checkpoint of the run recorded beside it "
                             f"({Path(path).parent / 'result.json'}: its config or sealed sha256 differs); retrain "
                             "that run with --force, or give the checkpoint.pt of the run you mean")
    return ckpt


def _as_json(v):
    """``v`` as its JSON text reads back (tuples as lists), to compare with a record read from JSON."""
    try:
        return json.loads(json.dumps(v, default=str))
    except (TypeError, ValueError):
        return None


def _record_beside(path: Path) -> dict | None:
    """The run record a ``checkpoint.pt`` sits beside (its folder's ``result.json``), if it is one of ours."""
    try:
        rec = json.loads((path.parent / "result.json").read_text())
    except (OSError, ValueError):  # none, unreadable or not JSON: a checkpoint copied alone is fine
        return None
    return rec if isinstance(rec, dict) and isinstance(rec.get("config"), dict) else None


def check_fits(cfg: TrainConfig, data: DataBundle) -> None:
    """Refuse, before a weight is allocated, a model whose training cannot fit the device's free memory.

    Its parameter count is read off the same model built with 1 and 2 blocks on the ``meta`` device (no memory, no
    Python object per block of a huge ``num_blocks``): base + L · per-block. Training holds at least four float32
    copies of them (weights, gradients, AdamW's two moments). A model that cannot be built on ``meta`` (a user's
    factory) is not checked here.
    """
    try:
        with torch.device("meta"):
            p1, p2 = (sum(p.numel() for p in build_model(cfg.arch, data.input_shape, data.num_classes, cfg.d_hidden, n,
                                                         cfg.mlp_ratio, cfg.seed, cfg.variant).parameters())
                      for n in (1, 2))
    except UsageError:
        raise
    except Exception:  # noqa: BLE001 (a factory that needs real tensors: built for real below, as before)
        return
    params = (p1 - (p2 - p1)) + (p2 - p1) * cfg.num_blocks
    need, free = 16 * params, free_memory(cfg.device)
    if free is not None and need > free:
        raise UsageError(f"--num-blocks {cfg.num_blocks}, --d-hidden {cfg.d_hidden}: the model has {params:.3g} "
                         f"parameters; training them needs at least {need / 2**30:.3g} GiB (weights, gradients, "
                         f"optimizer state), more than the {free / 2**30:.3g} GiB free on {cfg.device}; give fewer "
                         "blocks or a narrower model")


def free_memory(device: str) -> int | None:
    """Bytes free for a model on ``device``: CUDA's free memory, the CPU's available RAM (Linux); None if unknown."""
    if device.startswith("cuda"):
        return torch.cuda.mem_get_info(torch.device(device))[0]
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            kb = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:"))
        return kb * 1024
    except (OSError, StopIteration, ValueError, IndexError):
        return None


def check_readout(model: ResidualModel, data: DataBundle, arch: str | None, who: str | None = None) -> None:
    """The model's logits for two training examples must be (2, num_classes): else one line naming ``--arch``.

    ``who`` names the model's maker instead (a depth family: ``--family NAME (file:line)``).

    (A user's model whose readout has another width would otherwise fail inside the loss, mid-run.) Evaluated
    in eval mode without gradients: no running statistic or parameter changes.
    """
    from .models import MODELS
    from .plugins import defined_at

    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            p = next(iter(model.parameters()), None)  # (a CPU build check of data on a GPU: moved, two rows)
            logits = model(data.x_train[:2] if p is None else data.x_train[:2].to(p.device))
    except (RuntimeError, ValueError, TypeError, IndexError) as exc:  # a user's model whose parts do not fit (its
        # readout wired to the stem, say: walk 12 case 28): its forward pass named, not an internal error
        from .plugins import plugin_blame

        if plugin_blame(exc) is not None:  # raised in a plug-in's own code: named there, with its file and line
            raise
        who = who or f"--arch {arch} ({defined_at(MODELS.get(arch))})"
        raise UsageError(f"{who}: the model's forward pass on two examples "
                         f"of {data.name} fails: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}; check its "
                         "embed, blocks and readout") from None
    finally:
        model.train(was)
    want = (min(2, data.x_train.shape[0]), data.num_classes)
    got = tuple(getattr(logits, "shape", ()))
    if got != want:
        who = who or f"--arch {arch} ({defined_at(MODELS.get(arch))})"
        raise UsageError(f"{who}: the model returns logits of shape {got} for {want[0]} examples "
                         f"of {data.name}, not {want}: its readout must give one logit per class ({data.num_classes})")
    verify = getattr(model, "verify", None)  # a ResidualAdapter: the description proved as the evaluator proves it
    if callable(verify):  # (walk 41 cases 137, 138: plain blocks declared residual, or a readout leaving out a step
        # of the forward, were trained and audited as the network they do not describe)
        model.eval()
        try:
            verify(data.x_train[:2] if p is None else data.x_train[:2].to(p.device))
        except UsageError as exc:
            who = who or f"--arch {arch} ({defined_at(MODELS.get(arch))})"
            raise UsageError(f"{who}: {exc}") from None
        finally:
            model.train(was)


def build(cfg: TrainConfig, data: DataBundle) -> tuple[ResidualModel, CreditMethod]:
    """Model (init from ``cfg.seed``) with the frozen blocks' params not requiring grad, and its method."""
    if torch.get_default_dtype() != torch.float32:  # (your code's torch.set_default_dtype: the models would be
        raise UsageError(f"torch's default dtype is {torch.get_default_dtype()} (set by a plug-in or your code); "
                         "depthaudit trains in float32: leave the default dtype alone")  # float64, the data not)
    default = getattr(torch, "get_default_device", lambda: torch.device("cpu"))()
    if default.type == "meta":  # (your code's torch.set_default_device("meta"): weights without data, walk 29 W3)
        raise UsageError("torch's default device is meta (set by a plug-in or your code); depthaudit builds models "
                         "with real weights: torch.set_default_device(None) before the call")
    check_fits(cfg, data)
    model = build_model(cfg.arch, data.input_shape, data.num_classes, cfg.d_hidden, cfg.num_blocks,
                        cfg.mlp_ratio, cfg.seed, cfg.variant).to(cfg.device)
    if cfg.warm_start:  # BP warm start: weights from another run (e.g. BP-trained); feedback fresh
        ckpt = read_checkpoint(cfg.warm_start)
        try:
            model.load_state_dict(ckpt["model"])
        except RuntimeError as exc:
            lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
            what = lines[1] if len(lines) > 1 else lines[0] if lines else "mismatch"
            was = ckpt.get("config") if isinstance(ckpt.get("config"), dict) else {}
            differ = [f"--{k.replace('_', '-')} {was[k]}" for k in ("dataset", "arch", "variant", "d_hidden",
                                                                     "num_blocks", "mlp_ratio")
                      if k in was and was[k] != getattr(cfg, k)]
            fix = (f"it was trained with {', '.join(differ)}: give the same" if differ else
                   "train with the checkpoint's --dataset/--arch/--d-hidden/--num-blocks")
            raise UsageError(f"--warm-start {cfg.warm_start}: does not fit this model ({len(lines) - 1} "
                             f"mismatches, first: {what}); {fix}") from None
    check_readout(model, data, cfg.arch)
    trainable = set(cfg.trainable())
    for i, blk in enumerate(model.blocks, start=1):
        blk.requires_grad_(i in trainable)
    method = build_method(cfg.method, model, cfg.seed, cfg.credit_mix, cfg)
    if cfg.warmup is not None:  # the first round(fraction × budget steps) train under the warm-up method

        name, wcfg = parse_method_spec(cfg.warmup, replace(cfg, method="bp", method_options={}, warmup=None))
        total = cfg.epochs * math.ceil(data.x_train.shape[0] / cfg.batch_size)
        method = Warmup(build_method(name, model, cfg.seed, None, wcfg), method, round(cfg.warmup_fraction * total))
    return model, method


def check_augment(cfg: TrainConfig, data: DataBundle) -> None:
    """Refuse an augmentation of images for data that is not images, naming where the augmentation came from."""
    if cfg.augment == "none" or (data.pad_value is not None and data.x_train.dim() == 4):
        return
    from .plugins import defined_at

    meta = DATASETS.meta(cfg.dataset) if cfg.dataset in DATASETS else {}
    loader = DATASETS.get(cfg.dataset) if cfg.dataset in DATASETS else None
    if meta.get("augment") == cfg.augment and loader is not None and \
            not getattr(loader, "__module__", "").startswith("depthaudit."):  # the registration's default, not a
        # flag the user gave (walk 24 case 56: "--augment crop+flip" was blamed, never typed)
        raise ConfigError(f"--dataset {cfg.dataset} is registered with augment={cfg.augment!r} (its loader: "
                          f"{defined_at(loader)}) but is not an image dataset (no (N, C, H, W) inputs with a "
                          "pad_value): register it with augment='none', or give {augment=none}")
    raise ConfigError(f"{{augment}} {cfg.augment}: {data.name} is not an image dataset; use {{augment=none}}")


class Stepper:
    """One optimisation step of the recipe: set the cosine lr, zero grads, method step, optimizers step."""

    def __init__(self, cfg: TrainConfig, data: DataBundle, model: ResidualModel, method: CreditMethod):
        self.cfg, self.data, self.model, self.method = cfg, data, model, method
        self.opts = [make_optimizer(model, cfg)]
        check_augment(cfg, data)
        self.penalty = Penalty(cfg.scale_penalty, cfg.penalty_form, reduction=cfg.penalty_reduction)
        # augmentation draws its own stream (crop offsets, flips), on the data's device
        self.aug_gen = torch.Generator(device=data.x_train.device).manual_seed(derive_seed(cfg.seed, "augment"))

    def __call__(self, idx: torch.Tensor, lr: float) -> torch.Tensor:
        """Train on rows ``idx`` of the training tensors; returns the batch's mean loss (on the device)."""
        for opt in self.opts:
            for g in opt.param_groups:
                g["lr"] = lr
            opt.zero_grad(set_to_none=True)
        x = self.data.x_train[idx]  # (B, …)
        if self.cfg.augment != "none":
            x = augment_batch(x, self.cfg.augment, self.data.pad_value, self.aug_gen)
        loss = self.method.step(self.model, x, self.data.y_train[idx], self.penalty)
        for opt in self.opts:
            opt.step()
        self.method.after_step(self.model, lr, self.cfg.weight_decay)
        return loss


def cosine_lr(lr0: float, step: int, total: int) -> float:
    """Cosine schedule from ``lr0`` to 0 over ``total`` steps."""
    return lr0 * 0.5 * (1 + math.cos(math.pi * step / total))


def fit(n: int, batch_size: int, budget: int, lr0: float, seed, device, step, evaluate_fn,
        last_epoch: int | None = None, on_epoch_start=None, on_epoch_end=None, log=None,
        budget_note: str = ""):
    """The one training loop: every run in depthaudit (recipe, depth families, growth, stacked runs) trains here.

    Per epoch: ``on_epoch_start(epoch)`` (e.g. a growth insertion), a ``randperm`` shuffle on the device
    drawn from the run's shuffle seed, ``step(idx, lr)`` per batch with the cosine schedule from ``lr0``
    to 0 over ``budget`` epochs (returns the batch's mean loss on the device), one sync for the epoch's
    train loss, ``evaluate_fn() -> (test_loss, test_acc)``, then ``on_epoch_end(epoch, rec, diverged)``,
    which may add keys to the epoch's record and return a stop status (e.g. ``"stopped_flagged"``).
    Training stops after ``last_epoch`` (default: the budget). A non-finite loss ends the run with status
    ``diverged``, recorded, never raised. Returns ``(history, status)``.

    **Stacked runs** (``seed`` a list of R seeds, see :mod:`depthaudit.batched`): each run draws its own
    shuffle, ``idx`` is (R, B), ``step`` returns (R,) losses, ``evaluate_fn`` returns two length-R lists and
    ``on_epoch_end`` is a list of R callables; a run that diverges or stops is recorded and leaves the loop
    while the others go on. Returns ``([history_r], [status_r])``.
    """
    log = log or progress.say
    single = not isinstance(seed, (list, tuple))
    seeds = [seed] if single else list(seed)
    ends = [on_epoch_end] if single else list(on_epoch_end or [None] * len(seeds))
    last_epoch = budget if last_epoch is None else last_epoch
    steps_per_epoch = math.ceil(n / batch_size)
    if batch_size > n:  # (walk 19 case 52: a batch size above the training split was silent) full-batch training
        log(f"depthaudit: note: {budget_note}batch size {batch_size} exceeds the {n} training examples: one "
            f"batch of {n} a step, one step an epoch")
    total = max(1, budget * steps_per_epoch)
    gens = [torch.Generator(device=device).manual_seed(derive_seed(s, "shuffle")) for s in seeds]
    histories, statuses = [[] for _ in seeds], ["ok"] * len(seeds)
    active, step_i, t0 = list(range(len(seeds))), 0, time.perf_counter()
    # a bar over the run's steps where bars are drawn (progress.py); else the per-epoch lines alone
    with progress.bar(last_epoch * steps_per_epoch, f"{budget_note}training", "step", leave=False) as pbar:
        for epoch in range(1, last_epoch + 1):
            if not active:
                break
            if on_epoch_start is not None:
                on_epoch_start(epoch)
            perm = torch.stack([torch.randperm(n, device=device, generator=g) for g in gens])  # (R, n)
            loss_sum = torch.zeros(len(seeds), device=device, dtype=torch.float64)  # (R,); fp64: no rounding drift
            lr = lr0
            for i in range(steps_per_epoch):
                idx = perm[:, i * batch_size:(i + 1) * batch_size]  # (R, B)
                lr = cosine_lr(lr0, step_i, total)
                loss = step(idx[0] if single else idx, lr)
                loss_sum += loss.detach() * idx.shape[1]  # stays on the device: no per-step sync
                step_i += 1
                if pbar is not None:
                    pbar.update()  # a counter; tqdm redraws at most every 0.5 s
            train_losses = (loss_sum / n).tolist()  # sync point: once per epoch
            test_losses, test_accs = evaluate_fn()
            if single:
                test_losses, test_accs = [test_losses], [test_accs]
            of = f"{epoch}/{budget}" + (f" (stop after {last_epoch})" if last_epoch != budget else "")
            secs = round(time.perf_counter() - t0, 3)
            if single:
                log(f"{budget_note}epoch {of}  train_loss {train_losses[0]:.4f}  "
                    f"test_loss {test_losses[0]:.4f}  test_acc {test_accs[0]:.4f}  [{secs:.1f}s]")
            else:
                accs = [test_accs[r] for r in active]
                log(f"{budget_note}epoch {of}  {len(active)} stacked runs  "
                    f"test_acc {min(accs):.4f}–{max(accs):.4f}  [{secs:.1f}s]")
            if pbar is not None:
                pbar.set_postfix_str(f"epoch {of}, test_acc {max(test_accs[r] for r in active):.4f}", refresh=False)
            for r in list(active):
                rec = {"epoch": epoch, "train_loss": _finite(train_losses[r]), "test_loss": _finite(test_losses[r]),
                       "test_acc": test_accs[r], "lr_end": lr, "seconds": secs}
                diverged = not (math.isfinite(train_losses[r]) and math.isfinite(test_losses[r]))
                stop = ends[r](epoch, rec, diverged) if ends[r] is not None else None
                histories[r].append(rec)
                who = "" if single else f"run {r}: "
                if diverged:
                    statuses[r] = "diverged"
                    active.remove(r)
                    log(f"{who}diverged at epoch {epoch}: non-finite loss; stopping and recording the run")
                elif stop:
                    statuses[r] = stop
                    active.remove(r)
    return (histories[0], statuses[0]) if single else (histories, statuses)


def plain_step(model: torch.nn.Module, opt: torch.optim.Optimizer, data, loss_fn=F.cross_entropy):
    """The step strategy of plain backprop (the depth families): set lr, zero grads, backward, step."""

    def step(idx: torch.Tensor, lr: float) -> torch.Tensor:
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(data.x_train[idx]), data.y_train[idx])
        loss.backward()
        opt.step()
        return loss.detach()

    return step


def train_plain(model, data, epochs: int, batch: int, lr: float, wd: float, seed: int, device, log=None,
                loss_fn=F.cross_entropy, stop_after: int | None = None):
    """Plain backprop (AdamW, the recipe's cosine schedule) through the one training loop: ``(history, status)``.

    The schedule spans the ``epochs`` budget; ``stop_after`` trains only its first N epochs.
    """
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=wd)
    model.train()
    return fit(data.x_train.shape[0], batch, epochs, lr, seed, device, plain_step(model, opt, data, loss_fn),
               lambda: evaluate(model, data.x_test, data.y_test, 500, loss_fn), last_epoch=stop_after,
               log=log or (lambda m: None))

def train(cfg: TrainConfig, data: DataBundle, log=None, tracker=None, monitor=None, watch=None,
          on_epoch_start=None) -> RunOutput:
    """Train under the recipe; a non-finite loss ends the run with status ``diverged``.

    The cosine schedule spans the budget ``cfg.epochs``; with ``cfg.stop_after = N`` only its first N
    epochs are trained (so a short run is the protocol's first N epochs, not a shorter schedule).
    ``log(msg)`` receives one line per epoch (default: stderr). ``tracker(epoch, model, method, final)``
    (see :class:`depthaudit.diagnostics.Tracker`) is called at init (epoch 0) and after every epoch;
    what it returns (the measurement) is stored in that epoch's ``history`` record under ``probe``
    (:data:`~depthaudit.diagnostics.MEASUREMENT_KEY`, the stored name). ``monitor`` (see
    :class:`depthaudit.diagnostics.Monitor`) reads each measurement and records the first epoch each
    check fires; when it asks to stop, the run ends there with status ``stopped_flagged``. ``watch``
    (see :mod:`depthaudit.runlog`) mirrors every epoch's record to TensorBoard/W&B. ``on_epoch_start(epoch,
    stepper)`` runs before each epoch's shuffle (growth inserts blocks there: it may replace ``stepper.method``
    and add optimizer groups; the returned model and method are the stepper's at the end).
    """
    import os

    from .plugins import back_to

    cwd = os.getcwd()  # a plug-in's code (a method's credits, a diagnostic) that moves the process: undone and said
    try:  # before anything is written, so a relative --out stays where the command said (walk 29 W2)
        return _train(cfg, data, log, tracker, monitor, watch, on_epoch_start)
    finally:
        back_to(cwd, f"code run in training (--method {cfg.method}'s, or a plug-in's)")


def _train(cfg: TrainConfig, data: DataBundle, log, tracker, monitor, watch, on_epoch_start) -> RunOutput:
    log = log or progress.say
    model, method = build(cfg, data)
    stepper = Stepper(cfg, data, model, method)
    t0 = time.perf_counter()
    last_epoch = cfg.epochs_run
    at_init = tracker(0, model, method, last_epoch == 0) if tracker else None
    if monitor is not None and at_init is not None and monitor.update(0, at_init) and monitor.should_stop:
        last_epoch = 0  # fired at initialisation: nothing to train
        log(f"stopped before training: {', '.join(k for k, v in monitor.fired.items() if v)} fired at init")

    def on_epoch_end(epoch: int, rec: dict, diverged: bool) -> str | None:
        stats = stepper.method.epoch_stats()  # e.g. State Bridge's predictor loss
        if stats:
            rec["method"] = stats
        status = measure(epoch, rec, diverged)
        if watch is not None:
            watch.epoch(rec)
        return status

    def measure(epoch: int, rec: dict, diverged: bool) -> str | None:
        return measure_epoch(tracker, monitor, log, epoch, model, stepper.method, rec, diverged, last_epoch,
                             cfg.epochs)

    history, status = fit(data.x_train.shape[0], cfg.batch_size, cfg.epochs, cfg.lr, cfg.seed,
                          torch.device(cfg.device), stepper, lambda: evaluate(model, data.x_test, data.y_test),
                          last_epoch=last_epoch, on_epoch_end=on_epoch_end, log=log,
                          on_epoch_start=None if on_epoch_start is None else lambda e: on_epoch_start(e, stepper))
    if last_epoch == 0 and cfg.epochs_run > 0:
        status = "stopped_flagged"
    final = final_record(history, status, cfg.epochs)
    return RunOutput(status, history, final, time.perf_counter() - t0, stepper.model, stepper.method, at_init,
                     monitor.to_dict() if monitor is not None else None)


def measure_epoch(tracker, monitor, log, epoch: int, model, method, rec: dict, diverged: bool, last_epoch: int,
                  budget: int, who: str = "") -> str | None:
    """One run's measurement after an epoch (one run alone, or run r of a stack, written back first).

    The tracker measures (``final`` on the last epoch, at divergence, or when the monitor may stop the run);
    its result goes into ``rec["probe"]``; the monitor reads it, logs each check that fired, and asks to stop
    (``"stopped_flagged"``) under ``--stop-on-flag``.
    """
    if not tracker:
        return None
    stop_now = monitor is not None and monitor.stop_on_flag
    measured = tracker(epoch, model, method, final=diverged or epoch == last_epoch or stop_now)
    if measured is None:
        return None
    rec[MEASUREMENT_KEY] = measured
    fired = monitor.update(epoch, measured) if monitor is not None else []
    for name in fired:
        log(f"  {who}monitor: {name} fired at epoch {epoch} ({monitor.describe(name)})")
    if fired and monitor.should_stop and not diverged and epoch < last_epoch:  # (at the last epoch nothing is
        # left to stop: the run trained its whole budget, and is not recorded as stopped early — walk 46 case 158)
        log(f"{who}stopped at epoch {epoch} of {budget}: {', '.join(fired)} fired (--stop-on-flag)")
        return "stopped_flagged"
    return None


def final_record(history: list[dict], status: str, budget: int) -> dict:
    """A run's ``final`` record from its epoch history and status (the same for a run alone or stacked)."""
    last = history[-1] if history else {}
    return {"test_acc": last.get("test_acc"), "test_loss": last.get("test_loss"),
            "train_loss": last.get("train_loss"), "epochs_completed": len(history), "budget_epochs": budget,
            "diverged_at_epoch": last.get("epoch") if status == "diverged" else None,
            "stopped_at_epoch": last.get("epoch", 0) if status == "stopped_flagged" else None}
