"""The training loop: data on the device, ``randperm`` shuffles, one sync per epoch."""

import math
import sys
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from .config import TrainConfig, derive_seed
from .data import DataBundle
from .data.augment import augment_batch
from .errors import UsageError
from .methods import CreditMethod, build_method
from .models import ResidualModel, build_model
from .recipe import Penalty


@dataclass
class RunOutput:
    """What one run produced (the CLI adds provenance and writes it)."""

    status: str  # "ok" | "diverged" | "stopped_flagged"
    history: list[dict]
    final: dict
    seconds: float
    model: ResidualModel = field(repr=False)
    method: CreditMethod = field(repr=False)
    probe_init: dict | None = None  # tracker measurements at initialisation (epoch 0)
    monitor: dict | None = None  # the first epoch each D1/D2 check fired (see diagnostics.Monitor)


def _finite(v: float) -> float | None:
    return v if math.isfinite(v) else None


@torch.no_grad()
def evaluate(model: ResidualModel, x: torch.Tensor, y: torch.Tensor, batch: int = 1000):
    """(mean loss, accuracy) over ``x``; one host sync at the end."""
    model.eval()
    loss = torch.zeros((), device=x.device)
    correct = torch.zeros((), device=x.device, dtype=torch.long)
    for i in range(0, x.shape[0], batch):
        logits = model(x[i:i + batch])
        loss += F.cross_entropy(logits.float(), y[i:i + batch], reduction="sum")
        correct += (logits.argmax(-1) == y[i:i + batch]).sum()
    model.train()
    n = x.shape[0]
    return (loss / n).item(), correct.item() / n  # sync point: once per evaluation


def make_optimizer(model: ResidualModel, cfg: TrainConfig) -> torch.optim.Optimizer:
    """One independent AdamW per group (embed, each trainable block, readout), as named param groups.

    AdamW's update and state are per parameter, so one optimizer object with a param group per block is
    the same optimizer per block (tested bit for bit against separate objects) at one ``step()`` call's
    overhead instead of L + 2.
    """
    groups = [{"params": ps, "name": name} for name, ps in model.groups().items()
              if ps and all(p.requires_grad for p in ps)]
    return torch.optim.AdamW(groups, lr=cfg.lr, weight_decay=cfg.weight_decay)


def build(cfg: TrainConfig, data: DataBundle) -> tuple[ResidualModel, CreditMethod]:
    """Model (init from ``cfg.seed``) with the frozen blocks' params not requiring grad, and its method."""
    model = build_model(cfg.arch, data.input_shape, data.num_classes, cfg.d_hidden, cfg.num_blocks,
                        cfg.mlp_ratio, cfg.seed, cfg.variant).to(cfg.device)
    if cfg.warm_start:  # BP warm start: weights from another run (e.g. BP-trained); feedback fresh
        ckpt = torch.load(cfg.warm_start, map_location=cfg.device, weights_only=True)
        try:
            model.load_state_dict(ckpt["model"])
        except (RuntimeError, KeyError) as exc:
            raise UsageError(f"--warm-start {cfg.warm_start}: does not fit this model ({exc})") from None
    trainable = set(cfg.trainable())
    for i, blk in enumerate(model.blocks, start=1):
        blk.requires_grad_(i in trainable)
    return model, build_method(cfg.method, model, cfg.seed, cfg.credit_mix, cfg)


class Stepper:
    """One optimisation step of the recipe: set the cosine lr, zero grads, method step, optimizers step."""

    def __init__(self, cfg: TrainConfig, data: DataBundle, model: ResidualModel, method: CreditMethod):
        self.cfg, self.data, self.model, self.method = cfg, data, model, method
        self.opts = [make_optimizer(model, cfg)]
        if cfg.augment != "none" and (data.pad_value is None or data.x_train.dim() != 4):
            raise UsageError(f"--augment {cfg.augment}: {data.name} is not an image dataset; use --augment none")
        self.penalty = Penalty(cfg.scale_penalty, cfg.penalty_form)
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


def cosine_lr(cfg: TrainConfig, step: int, total: int) -> float:
    """Cosine schedule from ``cfg.lr`` to 0 over ``total`` steps."""
    return cfg.lr * 0.5 * (1 + math.cos(math.pi * step / total))


def train(cfg: TrainConfig, data: DataBundle, log=None, tracker=None, monitor=None) -> RunOutput:
    """Train under the recipe; a non-finite loss ends the run with status ``diverged``.

    The cosine schedule spans the budget ``cfg.epochs``; with ``cfg.stop_after = N`` only its first N
    epochs are trained (so a short run is the protocol's first N epochs, not a shorter schedule).
    ``log(msg)`` receives one line per epoch (default: stderr). ``tracker(epoch, model, method, final)``
    (see :class:`depthaudit.diagnostics.Tracker`) is called at init (epoch 0) and after every epoch;
    what it returns is stored in that epoch's ``history`` record under ``probe``. ``monitor`` (see
    :class:`depthaudit.diagnostics.Monitor`) reads each measurement and records the first epoch each
    check fires; when it asks to stop, the run ends there with status ``stopped_flagged``.
    """
    log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    device = torch.device(cfg.device)
    model, method = build(cfg, data)
    stepper = Stepper(cfg, data, model, method)
    n, bs = data.x_train.shape[0], cfg.batch_size
    steps_per_epoch = math.ceil(n / bs)
    total = max(1, cfg.epochs * steps_per_epoch)
    gen = torch.Generator(device=device).manual_seed(derive_seed(cfg.seed, "shuffle"))
    history, status, step, t0 = [], "ok", 0, time.perf_counter()
    tty = sys.stderr.isatty()
    last_epoch = cfg.epochs_run
    probe_init = tracker(0, model, method, last_epoch == 0) if tracker else None
    if monitor is not None and probe_init is not None and monitor.update(0, probe_init) and monitor.should_stop:
        status, last_epoch = "stopped_flagged", 0  # fired at initialisation: nothing to train
        log(f"stopped before training: {', '.join(k for k, v in monitor.fired.items() if v)} fired at init")
    for epoch in range(1, last_epoch + 1):
        perm = torch.randperm(n, device=device, generator=gen)
        loss_sum = torch.zeros((), device=device)
        for i in range(steps_per_epoch):
            idx = perm[i * bs:(i + 1) * bs]
            lr = cosine_lr(cfg, step, total)
            loss = stepper(idx, lr)
            loss_sum += loss * idx.shape[0]  # stays on the device: no per-step sync
            step += 1
            if tty and i % 50 == 0:
                print(f"\r  epoch {epoch} step {i}/{steps_per_epoch}", end="", file=sys.stderr, flush=True)
        train_loss = (loss_sum / n).item()  # sync point: once per epoch
        test_loss, test_acc = evaluate(model, data.x_test, data.y_test)
        rec = {"epoch": epoch, "train_loss": _finite(train_loss), "test_loss": _finite(test_loss),
               "test_acc": test_acc, "lr_end": lr, "seconds": round(time.perf_counter() - t0, 3)}
        stats = method.epoch_stats()  # e.g. State Bridge's predictor loss
        if stats:
            rec["method"] = stats
        diverged = not (math.isfinite(train_loss) and math.isfinite(test_loss))
        fired = []
        if tracker:
            stop_now = monitor is not None and monitor.stop_on_flag
            measured = tracker(epoch, model, method, final=diverged or epoch == last_epoch or stop_now)
            if measured is not None:
                rec["probe"] = measured
                if monitor is not None:
                    fired = monitor.update(epoch, measured)
        history.append(rec)
        of = f"{epoch}/{cfg.epochs}" + (f" (stop after {last_epoch})" if last_epoch != cfg.epochs else "")
        log(f"{chr(13) if tty else ''}epoch {of}  train_loss {train_loss:.4f}  "
            f"test_loss {test_loss:.4f}  test_acc {test_acc:.4f}  [{rec['seconds']:.1f}s]")
        for name in fired:
            log(f"  monitor: {name} fired at epoch {epoch} ({monitor.describe(name)})")
        if diverged:
            status = "diverged"
            log(f"diverged at epoch {epoch}: non-finite loss; stopping and recording the run")
            break
        if fired and monitor.should_stop:
            status = "stopped_flagged"
            log(f"stopped at epoch {epoch} of {cfg.epochs}: {', '.join(fired)} fired (--stop-on-flag)")
            break
    last = history[-1] if history else {}
    final = {"test_acc": last.get("test_acc"), "test_loss": last.get("test_loss"),
             "train_loss": last.get("train_loss"), "epochs_completed": len(history), "budget_epochs": cfg.epochs,
             "diverged_at_epoch": last.get("epoch") if status == "diverged" else None,
             "stopped_at_epoch": last.get("epoch", 0) if status == "stopped_flagged" else None}
    return RunOutput(status, history, final, time.perf_counter() - t0, model, method, probe_init,
                     monitor.to_dict() if monitor is not None else None)
