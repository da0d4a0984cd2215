"""Data: registry of loaders (:data:`DATASETS`), decoded-array cache, device placement."""

import os
from dataclasses import replace

import numpy as np
import torch

from ..errors import ConfigError, UsageError
from ..plugins import back_to, defined_at
from . import cifar, mnist1d, teacher  # noqa: F401  (registers the loaders)
from .base import DATASETS, ArrayData, DataBundle, cache_dir, to_bundle

__all__ = ["DATASETS", "ArrayData", "DataBundle", "cache_dir", "load_data"]


def load_data(name: str, data_dir: str | None, download: bool, device: torch.device,
              fingerprint: bool = True) -> DataBundle:
    """Load a registered dataset and place it on ``device``.

    ``fingerprint`` (a caller's load): the bundle keeps its tensors' digest, so one changed in place and passed
    back as ``data=`` is refused rather than recorded under the sha256 of the files it was loaded from.
    """
    device = _usable(device)
    loader = DATASETS.get(name)
    cwd = os.getcwd()
    try:
        arrays = loader(data_dir=data_dir, download=download)
    finally:
        back_to(cwd, f"--dataset {name}'s loader ({defined_at(loader)})")
    if not isinstance(arrays, ArrayData):  # a user's loader that returns something else: named where it is

        raise UsageError(f"--dataset {name}: its loader ({defined_at(loader)}) returned a {type(arrays).__name__}, "
                         "not an ArrayData; return depthaudit.data.ArrayData(x_train, y_train, x_test, y_test, "
                         "num_classes, source, sha256)")
    try:
        check_arrays(name, arrays)
    except UsageError as exc:  # a plug-in's loader: the refusal names where it is (walk 23 W1), as the others do
        if getattr(loader, "__module__", "").startswith("depthaudit."):
            raise
        rest = str(exc).removeprefix(f"--dataset {name}")
        raise UsageError(f"--dataset {name} (its loader: {defined_at(loader)}){rest}") from None
    arrays = replace(arrays, num_classes=int(arrays.num_classes))  # (walk 15 case 17: a numpy integer, fine as a
    bundle = to_bundle(name, arrays, device)  # count, went into every record and JSON refused it after training)
    return replace(bundle, fingerprint=bundle.tensors_digest()) if fingerprint else bundle


def _usable(device) -> torch.device:
    """``device`` as a torch.device this machine has, or one line naming ``device``.

    (walk 34 W12: da.load_data(…, "cuda") on a machine without CUDA was torch's AssertionError; "meta" a
    NotImplementedError after the data was read.)
    """
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ConfigError(f"{{device}} {device!r} not understood; use cpu, cuda or cuda:N") from None
    if dev.type not in ("cpu", "cuda"):
        raise ConfigError(f"{{device}} {str(dev)!r}: data is placed on cpu or cuda[:N]; use one of those")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{{device}} {str(dev)!r}: CUDA is not available here; use torch.device('cpu')")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ConfigError(f"{{device}} {str(dev)!r}: this machine has {torch.cuda.device_count()} CUDA device(s); "
                         "use cuda:0 … or cpu")
    return dev


def check_arrays(name: str, a) -> None:
    """What a dataset (built in or a plug-in's) returns must be usable: one line naming what is wrong."""
    k = a.num_classes
    if isinstance(k, bool) or not isinstance(k, int | np.integer):  # (walk 14 case 64: 4.0 was told "at least 2")
        raise UsageError(f"--dataset {name}: num_classes is {k!r} (a {type(k).__name__}); give an int ≥ 2, the "
                         "number of classes its labels use")
    if k > 2**20:  # (walk 12 case 23: 2**62 overflowed the readout's storage)
        raise UsageError(f"--dataset {name}: num_classes is {k}, more than any readout here is built for (2**20); "
                         "give the number of classes its labels use")
    if k < 2:
        raise UsageError(f"--dataset {name}: num_classes is {k!r}; a dataset needs at least 2 classes")
    for split, what, v in (("train", "inputs", a.x_train), ("train", "labels", a.y_train),
                           ("test", "inputs", a.x_test), ("test", "labels", a.y_test)):
        if not isinstance(v, np.ndarray):  # (walk 14 cases 67, 68: a tensor or a list was a traceback)
            fix = "v.numpy() (v.cpu().numpy() from a GPU)" if isinstance(v, torch.Tensor) else "np.asarray(v)"
            raise UsageError(f"--dataset {name}: its {split} {what} are a {type(v).__name__}, not a numpy array; "
                             f"ArrayData holds numpy arrays: give {fix}")
    for split, x in (("train", a.x_train), ("test", a.x_test)):  # (walk 13 cases 54, 58: a traceback, or the
        if x.ndim < 2:  # built-in model blamed)
            raise UsageError(f"--dataset {name}: its {split} inputs have shape {tuple(getattr(x, 'shape', ()))}; "
                             "give one row per example with its features, (N, d) or (N, H, W, C) (a scalar per "
                             "example: x[:, None])")
        if 0 in x.shape[1:]:  # (walk 14 case 71: zero features divided by zero in the model's init)
            raise UsageError(f"--dataset {name}: its {split} inputs have shape {tuple(x.shape)}: 0 features per "
                             "example; give at least one feature")
        numeric = np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)
        if not numeric:
            raise UsageError(f"--dataset {name}: its {split} inputs are of dtype {x.dtype}; give numbers (float32, "
                             "or uint8 images)")
        if x.dtype == np.uint8 and (x.ndim != 4 or x.shape[3] not in (1, 3)):  # uint8 is read as images, channels
            # last (walk 30 W1: flat or grayscale uint8 was an IndexError as an internal error)
            hint = (" (channels first? give x.transpose(0, 2, 3, 1))" if x.ndim == 4 and x.shape[1] in (1, 3) else
                    " (grayscale? give x[..., None])" if x.ndim == 3 else "")
            raise UsageError(f"--dataset {name}: its {split} inputs are uint8 of shape {tuple(x.shape)}; uint8 "
                             f"inputs are read as images (N, H, W, C) with C 1 or 3{hint}; for features give "
                             "x.astype(np.float32)")
    for split, x, y in (("train", a.x_train, a.y_train), ("test", a.x_test, a.y_test)):
        if len(x) != len(y) or len(y) == 0:
            raise UsageError(f"--dataset {name}: its {split} split has {len(x)} inputs and {len(y)} labels; "
                             "they must match (and not be empty)")
        y = np.asarray(y)
        if y.ndim != 1:  # (walk 45 W1: (N, 1) or one-hot labels passed every check, then failed inside the loss as
            # an internal error, after an audit had claimed its folder)
            hint = (" (one-hot? give y.argmax(1))" if y.ndim == 2 and y.shape[1] > 1 else
                    " (give y.reshape(-1))" if y.ndim >= 1 and y.size == len(y) else "")
            raise UsageError(f"--dataset {name}: its {split} labels have shape {tuple(y.shape)}; give one class index "
                             f"per example, shape ({len(x)},){hint}")
        if not np.issubdtype(y.dtype, np.integer):
            raise UsageError(f"--dataset {name}: its {split} labels are {y.dtype}, not integers; give integer class "
                             f"labels in 0..{k - 1} (e.g. y.astype(int64))")
        if y.min() < 0 or y.max() >= k:
            raise UsageError(f"--dataset {name}: its {split} labels span {y.min()}..{y.max()} but it declares "
                             f"{k} classes; labels must be integers in 0..{k - 1}")
        x = np.asarray(x)
        if np.issubdtype(x.dtype, np.floating) and not np.isfinite(x).all():
            bad = int(x.size - np.isfinite(x).sum())
            raise UsageError(f"--dataset {name}: its {split} inputs hold {bad} NaN or infinite values; a run on them "
                             "would be recorded as diverged: fix the data (or its loader)")
    for field in ("source", "sha256"):  # every result names where its data came from (its provenance)
        v = getattr(a, field, None)
        if not isinstance(v, str) or not v.strip():
            raise UsageError(f"--dataset {name}: its ArrayData {field} is {v!r}; give a non-empty string (sha256: a "
                             "hash of the data, e.g. depthaudit.data.base.content_digest(arrays))")
    if len(a.sha256) != 64 or a.sha256.strip("0123456789abcdef"):  # (walk 11 case 47: '../../etc' was recorded)
        raise UsageError(f"--dataset {name}: its ArrayData sha256 is {a.sha256[:80]!r}, not a sha256 digest (64 "
                         "lowercase hex digits); give the hash of the data, e.g. "
                         "depthaudit.data.base.content_digest(arrays) or hashlib.sha256(…).hexdigest()")
    if tuple(a.x_train.shape[1:]) != tuple(a.x_test.shape[1:]):
        raise UsageError(f"--dataset {name}: train inputs are {tuple(a.x_train.shape[1:])} but test inputs "
                         f"{tuple(a.x_test.shape[1:])}; both splits must have one input shape")
