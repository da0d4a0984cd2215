"""CIFAR-10 / CIFAR-100: official python-pickle layout, image-folder layout (plain or zipped), download.

Where the data is looked for, in order, under ``--data-dir`` (default: ``<cache>/data``):
the extracted pickle folder (``cifar-10-batches-py`` / ``cifar-100-python``, or the folder itself);
the official ``.tar.gz`` (its md5 is verified, then it is extracted); an image-folder tree
(``train/`` + ``test/``); a ``.zip`` of one (``--data-dir`` may name the zip itself). With
``--download`` a missing archive is fetched from the official URL and verified first.
"""

import hashlib
import pickle
import tarfile
import urllib.request
from pathlib import Path

import numpy as np

from ..errors import ConfigError, UsageError
from .base import CACHE_CHECK, DATASETS, ArrayData, cache_dir, cached_arrays, regular_file, sha256_files
from .imagefolder import load_image_dir, load_image_zip

SOURCES = {
    "cifar10": dict(url="https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
                    archive="cifar-10-python.tar.gz", md5="c58f30108f718f92721af3b95e74349a",
                    folder="cifar-10-batches-py", classes=10, label_key=b"labels",
                    train=[f"data_batch_{i}" for i in range(1, 6)], test=["test_batch"]),
    "cifar100": dict(url="https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
                     archive="cifar-100-python.tar.gz", md5="eb9058c3a382ffc7106e4002c42a8d85",
                     folder="cifar-100-python", classes=100, label_key=b"fine_labels",
                     train=["train"], test=["test"]),
}


def md5_file(path: Path) -> str:
    """md5 of a file (the checksum the official archives publish)."""
    h = hashlib.md5()
    with open(regular_file(path), "rb") as fh:
        while block := fh.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def verify_and_extract(archive: Path, md5: str, dest: Path) -> None:
    """Check ``archive``'s md5, then extract it into ``dest``; a mismatch is a UsageError."""
    got = md5_file(archive)
    if got != md5:
        raise UsageError(f"checksum mismatch for {archive}: md5 {got}, expected {md5}; "
                         "delete the file and download it again")
    try:
        with tarfile.open(archive) as tf:
            tf.extractall(dest, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise UsageError(f"cannot extract {archive} ({exc}); delete it and download it again") from None


def download(url: str, md5: str, archive: Path) -> None:
    """Fetch ``url`` to ``archive`` (via a temporary name), then verify its md5."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    tmp = archive.with_name(archive.name + ".part")
    try:
        urllib.request.urlretrieve(url, tmp)  # noqa: S310 - official URL or a caller's own
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ConfigError(f"download of {url} failed ({exc}); check the connection or use {{data_dir}}") from None
    got = md5_file(tmp)
    if got != md5:
        tmp.unlink(missing_ok=True)
        raise UsageError(f"checksum mismatch for {url}: md5 {got}, expected {md5}; nothing was kept")
    tmp.replace(archive)


def _read_pickles(folder: Path, spec: dict) -> list[np.ndarray]:
    arrays = []
    for split in ("train", "test"):
        xs, ys = [], []
        for fname in spec[split]:
            try:
                with open(regular_file(folder / fname), "rb") as fh:
                    d = pickle.load(fh, encoding="bytes")
                x = np.asarray(d[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
                y = np.asarray(d[spec["label_key"]], dtype=np.int64)
            except FileNotFoundError:
                raise UsageError(f"{folder}: missing {fname}; the pickle folder is incomplete") from None
            except Exception as exc:
                raise UsageError(f"{folder / fname}: corrupt CIFAR pickle ({type(exc).__name__}: {exc}); "
                                 "re-extract the archive") from None
            if len(x) != len(y) or (len(y) and (y.min() < 0 or y.max() >= spec["classes"])):
                raise UsageError(f"{folder / fname}: labels do not match the images; the file is corrupt")
            xs.append(x)
            ys.append(y)
        arrays += [np.concatenate(xs), np.concatenate(ys)]
    return arrays


def load_pickle_folder(folder: Path, name: str) -> ArrayData:
    """Read the official pickle folder."""
    spec = SOURCES[name]
    files = [folder / f for f in spec["train"] + spec["test"] if (folder / f).exists()]
    digest = sha256_files(files, folder)

    def build() -> ArrayData:
        arrays = _read_pickles(folder, spec)
        return ArrayData(*arrays, num_classes=spec["classes"], source=str(folder.resolve()), sha256=digest)

    return cached_arrays(f"{name}-pickle-{digest[:16]}", build)


def _find_cifar(name: str, data_dir: str | None, download_ok: bool) -> ArrayData:
    """Find CIFAR ``name`` under ``data_dir`` (see the module docstring), downloading if allowed."""
    spec = SOURCES[name]
    root = Path(data_dir).expanduser() if data_dir else cache_dir() / "data"
    if data_dir and not root.exists():
        if not download_ok:
            raise ConfigError(f"{{data_dir}} {root} does not exist; point it at a CIFAR copy or use {{download=True}}")
        root.mkdir(parents=True, exist_ok=True)  # (--download into a new folder: made, then filled)
        try:
            return _find_cifar(name, data_dir, download_ok)
        except BaseException:
            if root.is_dir() and not any(root.iterdir()):  # a failed download leaves no empty folder of ours
                root.rmdir()
            raise
    if root.is_file() and root.suffix == ".zip":
        return load_image_zip(root, name)
    for folder in (root / spec["folder"], root):
        if (folder / spec["test"][0]).exists():
            return load_pickle_folder(folder, name)
    archive = root / spec["archive"]
    if not archive.exists() and download_ok:
        download(spec["url"], spec["md5"], archive)
    if archive.exists():
        verify_and_extract(archive, spec["md5"], root)
        return load_pickle_folder(root / spec["folder"], name)
    if (root / "train").is_dir() and (root / "test").is_dir():
        return load_image_dir(root, name)
    zips = sorted(root.glob("*.zip")) if root.is_dir() else []
    if len(zips) == 1:
        return load_image_zip(zips[0], name)
    raise ConfigError(
        f"no {name} found in {root} (looked for {spec['folder']}/, {spec['archive']}, train/+test/, "
        f"or one .zip); pass {{data_dir=DIR}}, add {{download=True}} when online, or use {{dataset=mnist1d}}")


def load_cifar(name: str, data_dir: str | None, download_ok: bool) -> ArrayData:
    """CIFAR ``name``, checked to be what the name promises: 32×32 RGB images of ``SOURCES[name]["classes"]`` classes.

    An image folder or zip of another dataset (other sizes, greyscale, another class count) is refused in one
    line rather than trained on under the CIFAR name; ``--dataset imagefolder`` reads any other tree.
    """
    def check(data: ArrayData) -> None:
        want = SOURCES[name]["classes"]
        shape = tuple(data.x_train.shape[1:])
        if data.num_classes != want or shape not in ((32, 32, 3), (3, 32, 32)):
            raise ConfigError(f"{{dataset}} {name} expects 32×32 RGB images of {want} classes; {data.source} holds "
                              f"{data.num_classes} classes of shape {shape}; point {{data_dir}} at a {name} copy, or "
                              "use {dataset=imagefolder}")

    token = CACHE_CHECK.set(check)  # (checked before a decoded copy is cached under this name, too)
    try:
        data = _find_cifar(name, data_dir, download_ok)
    finally:
        CACHE_CHECK.reset(token)
    check(data)
    return data


@DATASETS.register("cifar10", epochs=100, augment="crop+flip", images=True)
def load_cifar10(data_dir=None, download=False) -> ArrayData:
    """CIFAR-10 (10 classes, 50k/10k, 32×32×3)."""
    return load_cifar("cifar10", data_dir, download)


@DATASETS.register("cifar100", epochs=100, augment="crop+flip", images=True)
def load_cifar100(data_dir=None, download=False) -> ArrayData:
    """CIFAR-100 with fine labels (100 classes)."""
    return load_cifar("cifar100", data_dir, download)
