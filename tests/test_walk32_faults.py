"""Walk 32's wrong cases, each reproduced as the walker did it (docs/walks/walk32_*.txt)."""

import hashlib
import json
import warnings

import numpy as np
import pytest

from depthaudit.cli import main
from depthaudit.data import DATASETS, ArrayData


def _arrays():
    rng = np.random.default_rng(0)
    x, xt = rng.normal(size=(300, 8)).astype(np.float32), rng.normal(size=(100, 8)).astype(np.float32)
    return x, rng.integers(0, 3, 300), xt, rng.integers(0, 3, 100)


LAYOUTS = {
    "plain": lambda x, y, xt, yt: (x, y, xt, yt),
    "negstride": lambda x, y, xt, yt: (np.ascontiguousarray(x[:, ::-1])[:, ::-1], y, xt, yt),
    "bigendian": lambda x, y, xt, yt: (x.astype(">f4"), y.astype(">i8"), xt.astype(">f4"), yt.astype(">i8")),
    "negstride_labels": lambda x, y, xt, yt: (x, np.ascontiguousarray(y[::-1])[::-1], xt, yt),
    "readonly": lambda x, y, xt, yt: tuple(_ro(a) for a in (x, y, xt, yt)),
}


def _ro(a):
    a = a.copy()
    a.setflags(write=False)
    return a


@pytest.mark.parametrize("layout", [k for k in LAYOUTS if k != "plain"])
def test_arrays_of_any_memory_layout_train_as_the_plain_ones(tmp_path, capsys, layout):
    """W1 (cases 87, 88, 172–174): a loader's float32 view with a negative stride, big-endian inputs or labels, or
    reversed labels was torch.from_numpy's ValueError, an internal error; a read-only array warned of undefined
    behaviour. The same numbers in any layout train to the same record, bit for bit."""
    finals = {}
    for kind in ("plain", layout):
        arrays = LAYOUTS[kind](*_arrays())
        assert np.array_equal(arrays[0], _arrays()[0])  # (the same numbers)
        name = f"w32{kind}"

        def load(data_dir=None, download=False, arrays=arrays):
            return ArrayData(*arrays, num_classes=3, source="w32", sha256=hashlib.sha256(b"w32").hexdigest())

        DATASETS.register(name, epochs=1)(load)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", UserWarning)  # (torch's "not writable" warning fails the test)
                assert main(["train", "--dataset", name, "--d-hidden", "8", "--num-blocks", "1",
                             "--out", str(tmp_path / kind)]) == 0, capsys.readouterr().err[-600:]
        finally:
            DATASETS._items.pop(name, None)
            DATASETS._meta.pop(name, None)
        finals[kind] = json.loads((tmp_path / kind / "result.json").read_text())["final"]
    print(finals)
    assert finals["plain"] == finals[layout]
