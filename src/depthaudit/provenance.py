"""Provenance recorded in every result file."""

import functools
import platform
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import torch

from . import __version__


@functools.lru_cache(maxsize=1)
def git_commit() -> dict:
    """Commit and dirty flag of the source tree depthaudit runs from (None outside a git checkout).

    Read once per process, when this module is imported — before any run starts — so a record names the code
    the process loaded, not the tree as it stands when a long run ends (an editable install can change under it).
    """
    here = Path(__file__).resolve().parent

    def git(*args):
        return subprocess.run(["git", "-C", str(here), *args], capture_output=True, text=True, timeout=10)

    try:
        rev = git("rev-parse", "HEAD")
        if rev.returncode != 0:
            return {"commit": None, "dirty": None}
        dirty = bool(git("status", "--porcelain", "--untracked-files=no").stdout.strip())
        return {"commit": rev.stdout.strip(), "dirty": dirty}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def device_name(device: torch.device) -> str:
    """Human-readable device: ``cpu (N threads)`` or the CUDA device's name."""
    if device.type == "cuda":  # a report of GPU runs can be rebuilt on a machine without one (nothing trains)
        name = torch.cuda.get_device_name(device) if torch.cuda.is_available() else "not on this machine"
        return f"{device} ({name})"
    return f"cpu ({torch.get_num_threads()} threads, {platform.processor() or platform.machine()})"


def provenance(device: torch.device, data_prov: dict, seed: int, argv: list[str] | None,
               started_at: datetime | None = None) -> dict:
    """Everything a reader needs to reproduce or trust a result.

    ``started_at``: when the work began (a run: its training's start); ``written_at``: when the record was made.
    """
    now = datetime.now(timezone.utc)
    return {
        "package": "depthaudit",
        "version": __version__,
        "git": git_commit(),
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "device": device_name(device),
        "data": data_prov,
        "seed": seed,
        "argv": argv,
        "started_at": (started_at or now).isoformat(timespec="seconds"),
        "written_at": now.isoformat(timespec="seconds"),
    }


git_commit()  # at import: see git_commit
