"""One run's record: the ``result.json`` content, its folder name, saving, and the audit's probe batch."""

import hashlib
import json
from pathlib import Path

import torch

from .config import TrainConfig, derive_seed
from .data import DataBundle
from .io import finite_json, save_torch, write_json
from .provenance import provenance
from .train import RunOutput

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


def probe_batch(data: DataBundle, seed: int, size: int):
    """A fixed probe batch from the held-out split, drawn with a seed derived from the run's seed."""
    n = data.x_test.shape[0]
    gen = torch.Generator().manual_seed(derive_seed(seed, "probe"))
    idx = torch.randperm(n, generator=gen)[:min(size, n)].to(data.x_test.device)
    return data.x_test[idx], data.y_test[idx]
