"""Run-or-reuse: one training run ↔ one folder with ``result.json``; a finished identical run is reused.

This is the single mechanism every experiment (audit pairs, ladders, later sweeps) trains through.
"""

import hashlib
import json
from pathlib import Path

import torch

from .config import TrainConfig, derive_seed
from .data import DataBundle
from .io import finite_json, save_torch, write_json
from .provenance import provenance
from .train import RunOutput, train

SCHEMA = "depthaudit.train.v1"


def result_record(cfg: TrainConfig, data: DataBundle, run: RunOutput, argv: list[str] | None,
                  tracking: dict | None = None) -> dict:
    """The ``result.json`` content of one run (config, provenance, history, final, status)."""
    rec = {"schema": SCHEMA, "status": run.status, "config": cfg.to_dict(),
           "provenance": provenance(torch.device(cfg.device), data.provenance(), cfg.seed, argv),
           "tracking": tracking, "history": run.history, "final": run.final,
           "timing": {"train_seconds": round(run.seconds, 3)}}
    if run.probe_init is not None:
        rec["probe_init"] = run.probe_init
    return finite_json(rec)


def save_run(out: Path, rec: dict, run: RunOutput, checkpoint: bool = True) -> None:
    """Write ``checkpoint.pt`` (weights + method feedback) then ``result.json``, each atomically."""
    if checkpoint:
        save_torch(out / "checkpoint.pt", {"config": rec["config"], "model": run.model.state_dict(),
                                           "method": run.method.state_dict(), "status": run.status})
    write_json(out / "result.json", rec)


def run_slug(cfg: TrainConfig, tracking: dict | None = None) -> str:
    """A readable, unique folder name for a config (+ a hash of everything, tracking included)."""
    blob = json.dumps([cfg.to_dict(), tracking], sort_keys=True).encode()
    tb = cfg.train_blocks.replace(":", "")
    return (f"{cfg.dataset}_{cfg.arch}_d{cfg.d_hidden}_L{cfg.num_blocks}_{cfg.method}_{tb}_e{cfg.epochs}"
            f"_s{cfg.seed}_{hashlib.sha256(blob).hexdigest()[:8]}")


def load_if_same(path: Path, cfg: TrainConfig, tracking: dict | None) -> dict | None:
    """The stored result if ``path`` holds a finished run of exactly this config and tracking."""
    try:
        rec = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if rec.get("config") == cfg.to_dict() and rec.get("tracking") == tracking:
        return rec
    return None


def probe_batch(data: DataBundle, seed: int, size: int):
    """A fixed probe batch from the held-out split, drawn with a seed derived from the run's seed."""
    n = data.x_test.shape[0]
    gen = torch.Generator().manual_seed(derive_seed(seed, "probe"))
    idx = torch.randperm(n, generator=gen)[:min(size, n)].to(data.x_test.device)
    return data.x_test[idx], data.y_test[idx]


def run_or_load(cfg: TrainConfig, data: DataBundle, root: Path, *, tracker=None, tracking: dict | None = None,
                log=print, argv: list[str] | None = None, checkpoint: bool = False) -> tuple[dict, bool]:
    """Reuse ``root/<slug>/result.json`` when it matches ``cfg``; otherwise train and save. → (record, reused)."""
    out = Path(root) / run_slug(cfg, tracking)
    rec = load_if_same(out / "result.json", cfg, tracking)
    if rec is not None:
        log(f"  reusing finished run {out}")
        return rec, True
    run = train(cfg, data, log=log, tracker=tracker)
    rec = result_record(cfg, data, run, argv, tracking)
    save_run(out, rec, run, checkpoint)
    return rec, False
