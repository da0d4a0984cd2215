"""Walk 31's wrong cases, each reproduced as the walker did it (docs/walks/walk31_*.txt)."""

import pytest

from depthaudit.data import DATASETS
from depthaudit.methods import METHODS
from depthaudit.methods.dfa import DFA
from depthaudit.models import MODELS


@pytest.mark.parametrize("reg", [METHODS, MODELS, DATASETS])
def test_a_name_too_long_for_a_file_name_is_refused_where_it_is_registered(reg):
    """W1 (cases 34–36): a 241-character method name was accepted; the audit claimed its folder, then failed on a
    run's file name ("File name too long; use a shorter path", which no --out could help), and its claim blocked
    the folder."""
    long = "m" + "x" * 240
    with pytest.raises(ValueError) as e:
        reg.register(long)(DFA)
    print(e.value)
    assert "is 241 characters long; use at most 64: it is part of every result's file name" in str(e.value)
    assert long not in reg
    ok = "m" + "x" * 63
    reg.register(ok)(type("W31", (DFA,), {}))
    try:
        assert ok in reg
    finally:
        reg._items.pop(ok, None)
        reg._meta.pop(ok, None)


@pytest.mark.parametrize("cmd", [
    ["saturation", "--family", "resmlp", "--method", "fa", "--extra", "0", "1", "--cell", "1"],
    ["grow", "--family", "resmlp", "--method", "fa", "--extra", "1", "--cell", "0"],
    ["saturation", "--family", "resmlp", "--extra", "0", "--list-cells"],
    ["grow", "--family", "resmlp", "--extra", "1", "--list-cells"],
    ["ladder", "--methods", "bp", "--seeds", "1", "--num-blocks", "1", "--list-cells"],
])
def test_a_file_layout_sweep_is_refused_in_another_commands_folder_before_it_lists_or_remembers(tmp_path, capsys,
                                                                                                 cmd):
    """W2 (cases 71, 72): a refused saturation/grow --cell wrote sweep.json into an audit's folder, and `report`
    then ran it; W3 (cases 74, 75): --list-cells listed their grid there as pending."""
    from depthaudit.cli import main

    out = tmp_path / "a"
    assert main(["audit", "--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1",
                 "--methods", "bp", "--seeds", "1", "--probe-batches", "1", "--probe-batch-size", "32",
                 "--out", str(out)]) == 0
    before = sorted(p.name for p in out.iterdir())
    capsys.readouterr()
    assert main([cmd[0], "--dataset", "mnist1d", "--d-hidden", "8", "--epochs", "1", *cmd[1:],
                 "--out", str(out)]) == 2
    o = capsys.readouterr()
    assert o.err.strip() == (f"depthaudit: error: {out} holds the results of another command (audit); {cmd[0]} "
                             "cannot write there: use another --out") and "pending" not in o.out
    assert sorted(p.name for p in out.iterdir()) == before
    assert main(["report", str(out)]) == 0


def test_a_saturation_whose_deepest_depth_cannot_fit_is_refused_before_any_depth(tmp_path, capsys):
    """W4 (case 86): --extra 0 5000000 trained and stored N0, then refused N5000000 by memory, naming --num-blocks."""
    from depthaudit.cli import main

    out = tmp_path / "v"
    assert main(["saturation", "--family", "resmlp", "--method", "fa", "--dataset", "mnist1d", "--epochs", "1",
                 "--extra", "0", "5000000", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    print(err)
    assert err.startswith("depthaudit: error: --extra 5000000: the model has ") and "epoch" not in err
    assert err.endswith("give a smaller --extra or a narrower --d-hidden") and not out.exists()


def test_identitys_folder_refusal_offers_a_file_it_can_write(tmp_path):
    """W5 (case 100): the example "GI2/identity.json" is an audit folder's claim, so following it was refused."""
    import depthaudit as da
    from depthaudit.cli import main

    a = tmp_path / "a"
    assert main(["audit", "--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1",
                 "--methods", "bp", "--seeds", "1", "--probe-batches", "1", "--probe-batch-size", "32",
                 "--out", str(a)]) == 0
    cfg = da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=1)
    with pytest.raises(da.ConfigError) as e:
        da.identity(cfg, (1,), probe_batches=1, probe_batch_size=32, out=a, progress=False)
    assert f"(e.g. {a / 'identity_check.json'})" in str(e.value)
    res = da.identity(cfg, (1,), probe_batches=1, probe_batch_size=32, out=a / "identity_check.json", progress=False)
    assert res.path == a / "identity_check.json" and res.path.is_file()


DIAG = '''import os
from depthaudit.diagnostics import Diagnostic, register

@register
class Fig31(Diagnostic):
    name = "fig31"
    order = 35

    def compute(self, snap):
        return {"per_layer": [0.0 for _ in snap.credits]}

    @classmethod
    def figures(cls, report, out):
        name = os.environ["W31FIG"]
        with open(os.path.join(out, name), "w") as f:
            f.write("fig31\\n")
        return {"fig31": name}
'''


@pytest.mark.parametrize("name,ok", [("../escaped31.png", False), ("report.md", False),
                                     ("cosine_heatmap.png", False), ("fig31.png", True)])
def test_a_diagnostics_figure_must_be_a_new_file_of_its_own(tmp_path, name, ok):
    """W6 (cases 105, 106): a plug-in diagnostic's figures() returned "../x.png" (linked outside the folder) or
    "report.md" (the report recorded as its own figure), and both were counted as figures."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    (tmp_path / "w31diag.py").write_text(DIAG)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), str(tmp_path)]), "OMP_NUM_THREADS": "1",
           "DEPTHAUDIT_CACHE_DIR": str(tmp_path / "cache"), "W31FIG": name}
    p = subprocess.run([sys.executable, "-m", "depthaudit", "--plugin", "w31diag", "audit", "--dataset", "mnist1d",
                        "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1", "--methods", "bp", "--seeds", "1",
                        "--probe-batches", "1", "--probe-batch-size", "32", "--out", "a"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    last = p.stderr.strip().splitlines()[-1]
    print(p.returncode, last)
    if ok:
        assert p.returncode == 0 and "fig31.png" in (tmp_path / "a" / "report.md").read_text()
        return
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert last.startswith(f"depthaudit: error: diagnostic Fig31 ({tmp_path / 'w31diag.py'}:") and \
        f"figures() named {name!r} for 'fig31'" in last
    assert not (tmp_path / "a" / "report.json").exists()


def test_two_ladders_swapped_runs_folders_are_named_as_moved(tmp_path, capsys):
    """W7 (cases 111, 112): two ladders' .runs folders swapped in one folder: the untouched JSON was "edited", and the
    advice rebuilt each ladder from the other's records (d=12's table under ladder_d8's name)."""
    from depthaudit.cli import main

    out = tmp_path / "l"
    c = ["ladder", "--dataset", "mnist1d", "--num-blocks", "1", "--epochs", "1", "--methods", "bp", "--seeds", "1",
         "--probe-batches", "1", "--probe-batch-size", "32", "--out", str(out)]
    assert main([*c, "--d-hidden", "8"]) == 0 and main([*c, "--d-hidden", "12"]) == 0
    a, b = out / "ladder_d8_L1_mnist1d.runs", out / "ladder_d12_L1_mnist1d.runs"
    a.rename(out / "tmp")
    b.rename(a)
    (out / "tmp").rename(b)
    capsys.readouterr()
    for argv in (["report", str(out)], [*c, "--d-hidden", "8"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        print(err)
        assert "holds the run records of ladder_d" in err and "(its .runs folder was moved, renamed or swapped on " \
            "disk); move it back to" in err and "edited" not in err
    b.rename(out / "tmp")
    a.rename(b)
    (out / "tmp").rename(a)  # put back, as the line says
    assert main(["report", str(out)]) == 0
    assert "resmlp d=8 " in (out / "ladder_d8_L1_mnist1d.md").read_text()


def test_two_saturations_swapped_runs_folders_are_named_as_moved(tmp_path, capsys):
    """Case 155: the same swap for two saturation sweeps (fa, dfa) in one folder rendered each under the other."""
    from depthaudit.cli import main

    out = tmp_path / "s"
    for m in ("fa", "dfa"):
        assert main(["saturation", "--family", "resmlp", "--method", m, "--dataset", "mnist1d", "--d-hidden", "8",
                     "--epochs", "1", "--extra", "0", "--out", str(out)]) == 0
    a, b = out / "saturation_resmlp_fa_mnist1d.runs", out / "saturation_resmlp_dfa_mnist1d.runs"
    a.rename(out / "tmp")
    b.rename(a)
    (out / "tmp").rename(b)
    capsys.readouterr()
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err
    assert "holds the run records of saturation_resmlp_" in err and "swapped on disk" in err


def test_a_stopped_file_layout_sweep_returns_its_folder(tmp_path):
    """W8 (cases 143, 144): da.ladder/saturation/grow stopped short (list_cells, one cell) returned Result.path =
    the store's JSON, never written by a listing; python-api.md promises the output folder, as da.audit returns."""
    import depthaudit as da

    base = da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=1, epochs=1)
    lc = da.LadderConfig(base=base, methods=("bp",), seeds=(1,), probe_batches=1, probe_batch_size=32)
    listed = da.SweepOptions(list_cells=True)
    for call, out in ((lambda o, sw: da.ladder(lc, o, sweep=sw, progress=False), tmp_path / "l"),
                      (lambda o, sw: da.saturation(da.SaturationConfig(family="resmlp", dataset="mnist1d", d_hidden=8,
                                                                       epochs=1, extra=(0,)), o, sweep=sw,
                                                   progress=False), tmp_path / "s"),
                      (lambda o, sw: da.grow(da.GrowConfig(family="resmlp", dataset="mnist1d", d_hidden=8, epochs=1,
                                                           extra=1), o, sweep=sw, progress=False), tmp_path / "g")):
        r = call(out, listed)
        assert r.path == out and r.stopped and not out.exists()
        r = call(out, da.SweepOptions(cell="0"))
        assert r.path == out and out.is_dir()
