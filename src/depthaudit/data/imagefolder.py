"""The image-folder layout ``train/<class>/*.png|jpg``, ``test/<class>/…``, plain or zipped.

Class labels are the class folders in alphabetical order (for CIFAR-10 that is the official order).
"""

import io
import re
import zipfile
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from ..errors import ConfigError, UsageError
from .base import DATASETS, ArrayData, cached_arrays, regular_file, sha256_file, sha256_files

EXTS = (".png", ".jpg", ".jpeg", ".bmp")


def _split_members(names: list[str]) -> dict[str, dict[str, list[str]]]:
    """{'train'|'test': {class: [member, …]}} from relative paths like ``[prefix/]train/cls/x.jpg``."""
    out: dict[str, dict[str, list[str]]] = {"train": {}, "test": {}}
    for n in names:
        parts = n.replace("\\", "/").split("/")
        if len(parts) < 3 or not parts[-1].lower().endswith(EXTS):
            continue
        split, cls = parts[-3], parts[-2]
        if split in out:
            out[split].setdefault(cls, []).append(n)
    return out


def _fit(img: Image.Image, size: int) -> Image.Image:
    """Shorter side to ``size`` (bilinear), then the centre ``size × size`` crop."""
    w, h = img.size
    s = size / min(w, h)
    img = img.resize((max(size, round(w * s)), max(size, round(h * s))), Image.BILINEAR)
    w, h = img.size
    left, top = (w - size) // 2, (h - size) // 2
    return img.crop((left, top, left + size, top + size))


def _decode(read, splits, where: str, size: int | None = None):
    classes = sorted(splits["train"])
    if not classes or sorted(splits["test"]) != classes:
        raise UsageError(f"{where}: expected train/<class>/ and test/<class>/ with the same classes; "
                         f"found train {sorted(splits['train'])[:5]}…, test {sorted(splits['test'])[:5]}…")
    arrays = []
    for split in ("train", "test"):
        xs, ys = [], []
        for label, cls in enumerate(classes):
            for name in sorted(splits[split][cls]):
                try:
                    img = Image.open(io.BytesIO(read(name))).convert("RGB")
                    img = _fit(img, size) if size else img
                except (UnidentifiedImageError, OSError, Image.DecompressionBombError, ValueError, SyntaxError) as exc:
                    why = re.sub(r"<[^<>]* at 0x[0-9a-f]+>", "it", str(exc))  # (no Python object in the line)
                    raise UsageError(f"{where}: cannot decode image {name} ({why}); the copy is corrupt") from None
                xs.append(np.asarray(img, dtype=np.uint8))
                ys.append(label)
        if len({x.shape for x in xs}) != 1:
            raise UsageError(f"{where}: images in {split}/ differ in size; use --dataset imagefolder-32 or "
                             "imagefolder-64 (resized and centre-cropped), or resize them to one size first")
        arrays += [np.stack(xs), np.asarray(ys, dtype=np.int64)]
    if arrays[0].shape[1:] != arrays[2].shape[1:]:
        raise UsageError(f"{where}: train images are {arrays[0].shape[2]}×{arrays[0].shape[1]} but test images "
                         f"{arrays[2].shape[2]}×{arrays[2].shape[1]}; use --dataset imagefolder-32 or imagefolder-64 "
                         "(resized and centre-cropped), or resize them to one size first")
    return arrays, len(classes)


def load_image_zip(path: Path, name: str, size: int | None = None) -> ArrayData:
    """Read a zip of the image-folder layout (members are read directly, nothing extracted)."""
    try:
        digest = sha256_file(path)
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
    except (zipfile.BadZipFile, OSError) as exc:
        raise ConfigError(f"{path}: not a readable zip ({exc}); re-copy it or point {{data_dir}} elsewhere") from None

    def build() -> ArrayData:
        with zipfile.ZipFile(path) as zf:
            try:
                arrays, k = _decode(zf.read, _split_members(names), str(path), size)
            except zipfile.BadZipFile as exc:
                raise UsageError(f"{path}: corrupt zip member ({exc}); re-copy the file") from None
        return ArrayData(*arrays, num_classes=k, source=str(path.resolve()), sha256=digest)

    return cached_arrays(f"{name}-imgzip-{digest[:16]}", build)


def load_image_dir(root: Path, name: str, size: int | None = None) -> ArrayData:
    """Read a plain directory holding ``train/`` and ``test/``."""
    files = [p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in EXTS
             and p.relative_to(root).parts[0] in ("train", "test")]
    digest = sha256_files(files, root)

    def build() -> ArrayData:
        rel = [str(p.relative_to(root)) for p in files]
        arrays, k = _decode(lambda n: regular_file(root / n).read_bytes(), _split_members(rel), str(root), size)
        return ArrayData(*arrays, num_classes=k, source=str(root.resolve()), sha256=digest)

    return cached_arrays(f"{name}-imgdir-{digest[:16]}", build)


def _load_tree(data_dir, name: str, size: int | None) -> ArrayData:
    """A ``train/<class>/``, ``test/<class>/`` image tree (plain or one .zip); ``size``: resized, centre-cropped."""
    if not data_dir:
        raise ConfigError(f"{{dataset}} {name} needs {{data_dir=DIR}} (a folder or .zip with train/<class>/ and "
                          "test/<class>/ images)")
    root = Path(data_dir).expanduser()
    if root.is_file() and root.suffix == ".zip":
        return load_image_zip(root, name, size)
    if (root / "train").is_dir() and (root / "test").is_dir():
        return load_image_dir(root, name, size)
    zips = sorted(root.glob("*.zip")) if root.is_dir() else []
    if len(zips) == 1:
        return load_image_zip(zips[0], name, size)
    raise ConfigError(f"{{data_dir}} {root}: no train/ and test/ folders, nor one .zip holding them")


@DATASETS.register("imagefolder", augment="crop+flip", images=True)
def load_imagefolder(data_dir=None, download=False) -> ArrayData:
    """Any image tree of any size and class count, as it is (all images of a split must share one size)."""
    return _load_tree(data_dir, "imagefolder", None)


def _register_resized(size: int) -> None:
    @DATASETS.register(f"imagefolder-{size}", augment="crop+flip", images=True)
    def load(data_dir=None, download=False) -> ArrayData:
        return _load_tree(data_dir, f"imagefolder-{size}", size)

    load.__doc__ = f"Any image tree, each image's shorter side resized to {size} and centre-cropped to {size}×{size}."


for _size in (32, 64):  # ImageNet-100-style trees at CIFAR resolution (the paper's CIFAR-style stem) or 64 px
    _register_resized(_size)
