"""Data loaders on small copies the tests write: pickle layout, image folders (plain and zipped), download."""

import hashlib
import io
import pickle
import tarfile
import time
import zipfile

import numpy as np
import pytest
import torch
from PIL import Image

from depthaudit.data import load_data
from depthaudit.data.cifar import download, verify_and_extract
from depthaudit.errors import UsageError

CLASSES = ["cat", "airplane", "dog"]  # deliberately unsorted: labels must follow alphabetical order


def _png(rgb):
    buf = io.BytesIO()
    Image.fromarray(np.full((8, 8, 3), rgb, dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def _members():
    for split, n in (("train", 4), ("test", 2)):
        for c_i, cls in enumerate(CLASSES):
            for j in range(n):
                yield f"{split}/{cls}/{j:04d}.png", _png((40 * c_i + j, 7, 200))


def _check(bundle):
    sorted_classes = sorted(CLASSES)
    assert bundle.input_shape == (3, 8, 8) and bundle.num_classes == 3
    assert bundle.x_train.shape[0] == 12 and bundle.x_test.shape[0] == 6
    # the red channel encodes the class; its rank must match the alphabetical label
    red = bundle.x_train[:, 0, 0, 0]
    for label, cls in enumerate(sorted_classes):
        expected_rank = CLASSES.index(cls)
        vals = red[bundle.y_train == label]
        assert vals.numel() == 4
        others = [red[bundle.y_train == lab].mean() for lab in range(3)]
        assert sorted(range(3), key=lambda k: others[k]).index(label) == expected_rank


def test_image_zip_and_folder_agree(tmp_path):
    z = tmp_path / "imgs.zip"
    with zipfile.ZipFile(z, "w", zipfile.ZIP_STORED) as zf:
        for name, data in _members():
            zf.writestr(f"copy/{name}", data)
    root = tmp_path / "plain"
    for name, data in _members():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    a = load_data("imagefolder", str(z), False, torch.device("cpu"))
    b = load_data("imagefolder", str(root), False, torch.device("cpu"))
    with pytest.raises(UsageError, match="expects 32×32 RGB images of 10 classes"):  # not CIFAR-10: refused by name
        load_data("cifar10", str(z), False, torch.device("cpu"))
    _check(a)
    _check(b)
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)
    assert a.sha256 == hashlib.sha256(z.read_bytes()).hexdigest()


def _cifar_pickles(folder, n=5, classes=10, label_key=b"labels", files=None):
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    files = files or [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for f in files:
        d = {b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
             label_key: list(rng.integers(0, classes, n))}
        (folder / f).write_bytes(pickle.dumps(d))
    return folder


def test_pickle_layout_cifar10_and_cifar100(tmp_path):
    _cifar_pickles(tmp_path / "c10" / "cifar-10-batches-py")
    b = load_data("cifar10", str(tmp_path / "c10"), False, torch.device("cpu"))
    assert b.x_train.shape == (25, 3, 32, 32) and b.x_test.shape == (5, 3, 32, 32)
    assert abs(b.x_train.mean(dim=(0, 2, 3))).max() < 1e-5  # standardised per channel
    _cifar_pickles(tmp_path / "c100" / "cifar-100-python", classes=100, label_key=b"fine_labels",
                   files=["train", "test"])
    b = load_data("cifar100", str(tmp_path / "c100"), False, torch.device("cpu"))
    assert b.num_classes == 100 and b.x_train.shape[0] == 5


def test_pickle_pixel_layout_is_official(tmp_path):
    # official rows are 1024 R, then 1024 G, then 1024 B values, row-major 32×32
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    row = np.zeros(3072, dtype=np.uint8)
    row[0], row[1024 + 33] = 255, 128  # R at (0,0); G at (1,1)
    for f in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        (folder / f).write_bytes(pickle.dumps({b"data": np.stack([row, row * 0]), b"labels": [0, 1]}))
    from depthaudit.data.cifar import SOURCES, _read_pickles

    xtr = _read_pickles(folder, SOURCES["cifar10"])[0]
    assert xtr[0, 0, 0, 0] == 255 and xtr[0, 1, 1, 1] == 128 and xtr[0, 1, 1, 0] == 0


def test_second_load_is_cached(tmp_path):
    root = tmp_path / "plain"
    for name, data in _members():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    load_data("imagefolder", str(root), False, torch.device("cpu"))
    from depthaudit.data import cache_dir

    entries = list((cache_dir() / "decoded").glob("imagefolder-imgdir-*.npz"))
    assert len(entries) == 1
    t = time.perf_counter()
    b = load_data("imagefolder", str(root), False, torch.device("cpu"))
    print(f"cached load {time.perf_counter() - t:.3f}s")
    _check(b)


def _tarball(tmp_path):
    src = _cifar_pickles(tmp_path / "src" / "cifar-10-batches-py")
    tgz = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(tgz, "w:gz") as tf:
        tf.add(src, arcname="cifar-10-batches-py")
    return tgz, hashlib.md5(tgz.read_bytes()).hexdigest()


def test_download_verifies_checksum(tmp_path):
    tgz, md5 = _tarball(tmp_path)
    dest = tmp_path / "dl" / "cifar-10-python.tar.gz"
    with pytest.raises(UsageError, match="checksum mismatch"):
        download(tgz.as_uri(), "0" * 32, dest)
    assert not dest.exists() and not list(dest.parent.glob("*.part"))
    download(tgz.as_uri(), md5, dest)
    verify_and_extract(dest, md5, dest.parent)
    b = load_data("cifar10", str(dest.parent), False, torch.device("cpu"))
    assert b.x_train.shape[0] == 25


def test_download_failure_is_usage_error(tmp_path):
    with pytest.raises(UsageError, match="download of"):
        download((tmp_path / "missing.tar.gz").as_uri(), "0" * 32, tmp_path / "x.tar.gz")


def test_image_trees_of_mixed_sizes_resized_and_a_wider_resnet(tmp_path, capsys):
    from PIL import Image

    from depthaudit.cli import main
    from depthaudit.models.resnet import ResNetCIFAR

    rng = np.random.default_rng(0)
    for split, n in (("train", 4), ("test", 2)):
        for c in ("a", "b"):
            d = tmp_path / "tree" / split / c
            d.mkdir(parents=True)
            for j in range(n):  # ImageNet-like: every image its own size
                w, h = rng.integers(40, 90, 2)
                Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(d / f"{j}.png")
    with pytest.raises(UsageError, match="imagefolder-32"):
        load_data("imagefolder", str(tmp_path / "tree"), False, torch.device("cpu"))
    b = load_data("imagefolder-32", str(tmp_path / "tree"), False, torch.device("cpu"))
    assert b.input_shape == (3, 32, 32) and b.num_classes == 2 and b.x_train.shape[0] == 8
    assert load_data("imagefolder-64", str(tmp_path / "tree"), False, torch.device("cpu")).input_shape == (3, 64, 64)
    m = ResNetCIFAR(2, 1, 0, 3, base_width=32)
    assert m.widths == (32, 64, 128) and m(b.x_train[:2]).shape == (2, 2)
    out = tmp_path / "sat"
    assert main(["saturation", "--dataset", "imagefolder-32", "--data-dir", str(tmp_path / "tree"), "--extra", "0",
                 "--epochs", "1", "--batch-size", "4", "--base-width", "32", "--analysis-batches", "1",
                 "--out", str(out)]) == 0
    import json

    doc = json.loads((out / "saturation_resnet_imagefolder-32.json").read_text())
    assert doc["identity"]["base_width"] == 32 and doc["runs"]["N0"]["config"]["base_width"] == 32
