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


C = ["--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1", "--probe-batches", "1",
     "--probe-batch-size", "32"]


def test_a_probes_grid_the_folder_would_refuse_is_neither_listed_nor_trained(tmp_path, capsys):
    """W3 (cases 228–230): the folder's probes_fa belonged to alphas 0 0.5; alphas 0 0.25 --list-cells listed a0.25
    as pending and --cell trained it (replacing sweep.json), which the grid's rerun then refused."""
    out = tmp_path / "p"
    grid = ["probes", *C, "--method", "fa", "--seeds", "1", "--out", str(out)]
    assert main([*grid, "--alphas", "0", "0.5"]) == 0
    before = sorted(p.name for p in out.iterdir())
    for extra in (["--list-cells"], ["--cell", "a0.25/s1"]):
        capsys.readouterr()
        assert main([*grid, "--alphas", "0", "0.25", *extra]) == 2
        o = capsys.readouterr()
        assert "belongs to another probes (differs in alphas)" in o.err and "pending" not in o.out
        assert sorted(p.name for p in out.iterdir()) == before
    assert main([*grid, "--alphas", "0", "0.5", "--list-cells"]) == 0  # its own grid: listed


def test_a_stale_sweep_json_of_a_command_that_cannot_write_here_is_named(tmp_path, capsys):
    """W2 (cases 194, 196, 197): an audit's sweep.json left in a folder that now holds a ladder made `report`
    advise rerunning that audit without --cell, which the folder refuses; now it says to remove sweep.json."""
    out = tmp_path / "n"
    assert main(["audit", *C, "--methods", "bp", "--seeds", "1", "--out", str(out), "--cell", "0"]) == 0
    import shutil

    for name in ("runs", "identity.json", ".lock"):
        p = out / name
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    assert main(["ladder", *C, "--methods", "bp", "--seeds", "1", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    print(err)
    assert err.endswith(f"remove {out / 'sweep.json'} to render what the folder holds")
    (out / "sweep.json").unlink()  # as the line says
    assert main(["report", str(out)]) == 0
