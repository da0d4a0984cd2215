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
               started_at: datetime | None = None, uses: dict | None = None) -> dict:
    """Everything a reader needs to reproduce or trust a result.

    ``started_at``: when the work began (a run: its training's start); ``written_at``: when the record was made.
    ``uses``: the registered names the result ran (``{"method": [...], "arch": [...], "dataset": [...],
    "diagnostics": True}``): code outside depthaudit among them is named under ``plugins``.
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
        **({"plugins": mods} if uses and (mods := plugin_modules(uses)) else {}),
        "started_at": (started_at or now).isoformat(timespec="seconds"),
        "written_at": now.isoformat(timespec="seconds"),
    }


# the registries a user's code registers into (read from sys.modules: this module sits below them all)
_REGISTRIES = {"method": ("depthaudit.methods", "METHODS"), "arch": ("depthaudit.models", "MODELS"),
               "dataset": ("depthaudit.data", "DATASETS"), "family": ("depthaudit.experiments.families", "FAMILIES"),
               "diagnostics": ("depthaudit.diagnostics", "DIAGNOSTICS")}


def plugin_modules(uses: dict) -> list[dict]:
    """The modules outside depthaudit that registered what ``uses`` names (every diagnostic where it says so).

    Each as ``{"module", "file", "sha256"}`` (the source file's digest when its code registered: the code that
    ran, even if the file was edited since), so a result that names a plug-in's method also names the code it ran
    (walk 24 case 152: the record held no trace of it). A
    plug-in's code is not part of a run's identity, as depthaudit's own is not: a changed plug-in shows here.
    """
    from .errors import UsageError
    from .io import sha256_file

    mods = {}
    for kind, (modname, attr) in _REGISTRIES.items():
        reg = getattr(sys.modules.get(modname), attr, None)
        want = uses.get(kind)
        if reg is None or not want:
            continue
        names = reg.names() if want is True else [n for n in ([want] if isinstance(want, str) else want) if n in reg]
        for name in names:
            obj = reg.get(name)
            mod = getattr(obj, "__module__", None) or ""
            if mod and not mod.startswith("depthaudit.") and mod != "depthaudit":
                mods.setdefault(mod, getattr(sys.modules.get(mod), "__file__", None))
    from .registry import LOADED_AS

    out = []
    for mod, file in sorted(mods.items()):
        try:  # the file as its code was registered (the code that ran), else as it is now
            digest = LOADED_AS.get(file) or (sha256_file(Path(file)) if file else None)
        except (OSError, UsageError):  # (a module file gone, or not a regular file: no digest to give)
            digest = None
        out.append({"module": mod, "file": file, "sha256": digest})
    return out


git_commit()  # at import: see git_commit
