"""Datasets: a registry of loaders that return decoded arrays, plus caching and device placement."""

import hashlib
import os
import sys
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..io import regular_file, sha256_file  # noqa: F401 (the data's own names for them)
from ..registry import Registry


def _check_dataset_meta(name: str, meta: dict) -> None:
    """A dataset's registered defaults, checked when registered: a budget, an augmentation, a flag."""
    from .augment import AUGMENTS

    ep = meta.get("epochs")
    if "epochs" in meta and (isinstance(ep, bool) or not isinstance(ep, int) or ep < 1):
        raise ValueError(f"dataset {name!r}: its registered epochs (the default budget) must be an integer >= 1, "
                         f"got {ep!r}; fix DATASETS.register({name!r}, epochs=…)")
    if "augment" in meta and meta["augment"] not in AUGMENTS:
        raise ValueError(f"dataset {name!r}: its registered augment {meta['augment']!r} is not one of "
                         f"{', '.join(AUGMENTS)}; fix DATASETS.register({name!r}, augment=…)")
    if "generated" in meta and not isinstance(meta["generated"], bool):
        raise ValueError(f"dataset {name!r}: generated must be True or False, got {meta['generated']!r}")
    if "images" in meta and not isinstance(meta["images"], bool):
        raise ValueError(f"dataset {name!r}: images must be True or False, got {meta['images']!r}")
    if meta.get("images") is False and meta.get("augment", "none") != "none":
        raise ValueError(f"dataset {name!r}: augment {meta['augment']!r} augments images, and images=False; "
                         f"fix DATASETS.register({name!r}, …)")


DATASETS: Registry = Registry("dataset", check_meta=_check_dataset_meta,
                               meta_keys=("epochs", "augment", "generated", "images"))


def generated(name: str) -> bool:
    """Whether dataset ``name`` is made here (MNIST-1D, the teachers), not read: no folder, no download."""
    return name in DATASETS and bool(DATASETS.meta(name).get("generated"))


@dataclass(frozen=True)
class ArrayData:
    """Decoded data as the loaders return it (numpy, CPU)."""

    x_train: np.ndarray  # (N, *input_shape) float32, or uint8 images (N, H, W, 3)
    y_train: np.ndarray  # (N,) int64
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    source: str  # where it came from: a path, a URL, or the generator and its arguments
    sha256: str  # content hash of the source


@dataclass(frozen=True)
class DataBundle:
    """Training-ready tensors, already on the training device (the hot loop only slices them)."""

    name: str
    x_train: torch.Tensor  # (N, *input_shape) float32
    y_train: torch.Tensor  # (N,) int64
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    source: str
    sha256: str
    pad_value: torch.Tensor | None = None  # (C,) a black pixel after normalisation (images only; augmentation)
    # the tensors' own digest when loaded for a caller (da.load_data): a bundle changed in place afterwards is no
    # longer the data its sha256 names (checked where it is passed back, ``data=``)
    fingerprint: str | None = None

    def tensors_digest(self) -> str:
        """sha256 over the four tensors' dtypes, shapes and bytes, as they are now (a copy to the CPU)."""
        h = hashlib.sha256()
        for t in (self.x_train, self.y_train, self.x_test, self.y_test):
            a = t.detach().cpu().contiguous().numpy()
            h.update(f"{a.dtype.str}{a.shape}".encode())
            h.update(memoryview(a).cast("B"))
        return h.hexdigest()

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one example."""
        return tuple(self.x_train.shape[1:])

    def provenance(self) -> dict:
        """What a result file records about the data."""
        return {"name": self.name, "source": self.source, "sha256": self.sha256,
                "n_train": int(self.x_train.shape[0]), "n_test": int(self.x_test.shape[0]),
                "input_shape": list(self.input_shape), "num_classes": self.num_classes}


def cache_dir() -> Path:
    """``$DEPTHAUDIT_CACHE_DIR``, else ``~/.cache/depthaudit``."""
    return Path(os.environ.get("DEPTHAUDIT_CACHE_DIR") or Path.home() / ".cache" / "depthaudit")


def sha256_files(paths: list[Path], root: Path) -> str:
    """Content hash over several files, with their relative names, in sorted order."""
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(str(p.relative_to(root)).encode() + b"\0")
        h.update(bytes.fromhex(sha256_file(p)))
    return h.hexdigest()


ARRAYS = ("x_train", "y_train", "x_test", "y_test")


def content_digest(arrays) -> str:
    """sha256 over the decoded arrays' dtypes, shapes and bytes (what a cache entry must still hold when read)."""
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(memoryview(a).cast("B"))
    return h.hexdigest()


# what a loader promises about the arrays it builds (set around the build by e.g. load_cifar): checked before they
# are cached, so a refused source never leaves a decoded copy under its name
CACHE_CHECK: ContextVar = ContextVar("depthaudit_cache_check", default=None)


def cached_arrays(key: str, build) -> ArrayData:
    """Load decoded arrays from the cache under ``key``, or ``build()`` them and store them atomically."""
    path = cache_dir() / "decoded" / f"{key}.npz"
    if path.exists():
        try:
            z = np.load(path, allow_pickle=False)
            arrays = [z[k] for k in ARRAYS]
            if str(z["content_sha256"]) != content_digest(arrays):  # an altered entry (its data changed under the
                raise ValueError("altered")  # source's hash, which the results would name): rebuilt from the source
            return ArrayData(*arrays, int(z["num_classes"]), str(z["source"]), str(z["sha256"]))
        except Exception:  # a damaged or altered cache entry (or one older than its digest) is rebuilt, never trusted
            print(f"depthaudit: note: the decoded cache {path} is damaged, altered or older than its digest; it is "
                  "rebuilt from the source", file=sys.stderr)
            path.unlink(missing_ok=True)
    data = build()
    if CACHE_CHECK.get() is not None:
        CACHE_CHECK.get()(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.npz")
    try:
        arrays = dict(zip(ARRAYS, (data.x_train, data.y_train, data.x_test, data.y_test), strict=True))
        np.savez(tmp, **arrays, num_classes=data.num_classes, source=data.source, sha256=data.sha256,
                 content_sha256=content_digest(list(arrays.values())))
        os.replace(tmp, path)
    except BaseException as exc:  # a full disk or an interrupt leaves no half-written cache entry
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.filename is None:
            exc.filename = str(path)
        raise
    return data


def to_bundle(name: str, a: ArrayData, device: torch.device) -> DataBundle:
    """Normalise and move to ``device``.

    Images (uint8, N×H×W×3) become float32 N×3×H×W standardised per channel with training-set
    statistics; float inputs are used as they are.
    """
    # uint8 travels to the device first (4× less to copy), conversion happens there, in place
    xtr, xte = _tensor(a.x_train).to(device), _tensor(a.x_test).to(device)
    pad = None
    if xtr.dtype == torch.uint8:
        xtr, xte = (_chw_float(t) for t in (xtr, xte))
        std, mean = torch.std_mean(xtr, dim=(0, 2, 3), keepdim=True)
        std = std.clamp_min(1e-6)  # a constant channel stays 0, not inf
        for t in (xtr, xte):
            t.sub_(mean).div_(std)
        pad = (-mean / std).flatten()  # (C,) where a zero (black) raw pixel lands
    return DataBundle(
        name=name,
        x_train=xtr.float().contiguous(),
        y_train=_tensor(a.y_train).long().to(device),
        x_test=xte.float().contiguous(),
        y_test=_tensor(a.y_test).long().to(device),
        num_classes=a.num_classes, source=a.source, sha256=a.sha256, pad_value=pad,
    )


def _tensor(x: np.ndarray) -> torch.Tensor:
    """``x`` as a tensor whatever its memory layout.

    A negative-stride view (``x[::-1]``), another byte order (``>f4``) or a read-only array is copied into a
    native, contiguous, writable one first (walk 32 W1: torch refused each, an internal error; a read-only one
    warned of undefined behaviour).
    """
    x = np.asarray(x)
    if not x.dtype.isnative:
        x = x.astype(x.dtype.newbyteorder("="))
    if any(st < 0 for st in x.strides) or not x.flags.writeable:
        x = np.array(x, order="C", copy=True)
    return torch.from_numpy(x)


def _chw_float(x: torch.Tensor) -> torch.Tensor:
    """(N, H, W, C) uint8 → (N, C, H, W) float32 in [0, 1], one copy."""
    out = torch.empty((x.shape[0], x.shape[3], x.shape[1], x.shape[2]), dtype=torch.float32, device=x.device)
    out.copy_(x.permute(0, 3, 1, 2))
    return out.div_(255)


def unchanged_data(data):
    """``data`` (a caller's bundle), refused when its tensors changed since ``da.load_data`` gave it.

    Every record names the data by the sha256 of the files it was loaded from; tensors edited in place (labels
    shuffled, inputs zeroed, a subset) are other data under that name, which a later run of the real dataset
    would reuse. A bundle built without a fingerprint (a user's own) is taken as its sha256 says.
    """
    fp = getattr(data, "fingerprint", None)
    if fp is not None and data.tensors_digest() != fp:
        from ..errors import ConfigError

        raise ConfigError(f"{{data}}: its tensors changed after da.load_data gave them, so they are no longer the "
                          f"{data.name} data its sha256 names; load it again, or register your changed data as a "
                          "dataset of its own name and sha256 (docs: extending)")
    return data
