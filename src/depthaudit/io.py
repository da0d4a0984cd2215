"""Atomic file writes: a reader never sees a half-written result."""

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch


def _atomic(path: Path, write) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON by write-to-temp then ``os.replace``."""
    data = (json.dumps(obj, indent=2, sort_keys=False, allow_nan=True) + "\n").encode()
    _atomic(path, lambda fh: fh.write(data))


def save_torch(path: Path, obj: Any) -> None:
    """``torch.save`` with the same atomic replace."""
    _atomic(path, lambda fh: torch.save(obj, fh))
