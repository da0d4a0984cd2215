"""Atomic file writes: a reader never sees a half-written result."""

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import torch


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


def _atomic(path: Path, write) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; results should get the usual permissions
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def finite_json(obj: Any) -> Any:
    """Replace non-finite floats (a diverged run's NaN/inf) by None so the file is strict JSON."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite_json(v) for v in obj]
    return obj


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as strict, indented JSON by write-to-temp then ``os.replace``."""
    data = (json.dumps(finite_json(obj), indent=2, allow_nan=False) + "\n").encode()
    _atomic(path, lambda fh: fh.write(data))


def save_torch(path: Path, obj: Any) -> None:
    """``torch.save`` with the same atomic replace."""
    _atomic(path, lambda fh: torch.save(obj, fh))


def write_text(path: Path, text: str) -> None:
    """Atomic text write."""
    _atomic(path, lambda fh: fh.write(text.encode()))


def save_figure(fig, path: Path) -> None:
    """Atomic PNG write of a matplotlib figure."""
    _atomic(path, lambda fh: fig.savefig(fh, format="png", dpi=120, bbox_inches="tight"))


def check_output_dir(path, flag: str = "--out", subdirs: tuple[str, ...] = ()) -> None:
    """Refuse, before any work, an output folder that cannot be made or written (one line, the fix named).

    ``subdirs`` are folders the command will create inside it (e.g. the audit's ``runs``).
    """
    from .errors import UsageError

    p = Path(path)
    for q in (p, *(p / s for s in subdirs)):
        if q.exists() and not q.is_dir():
            raise UsageError(f"{flag} {p}: {q} exists and is not a folder; move it or choose another {flag}")
    anc = p
    while not anc.exists() and anc != anc.parent:
        anc = anc.parent
    if not anc.is_dir():
        raise UsageError(f"{flag} {p}: {anc} is a file, so the folder cannot be made; choose another {flag}")
    if not os.access(anc, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {p}: {anc} is not writable; choose another {flag}")
