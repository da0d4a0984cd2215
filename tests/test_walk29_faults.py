"""Walk 29's wrong cases, each reproduced as the walker did it (docs/walks/walk29_*.txt)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from depthaudit.cli import main

ROOT = Path(__file__).resolve().parents[1]
C = ["--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--epochs", "1", "--probe-batches", "1",
     "--probe-batch-size", "32"]


def test_a_damaged_audit_record_is_named_in_the_ladders_cross_check(tmp_path, capsys):
    """W4 (cases 68, 69): an audit record edited (seal kept), linked to another or truncated read "not in audit"
    in the ladder's cross-check, with nothing naming the damage."""
    lad, aud = tmp_path / "l", tmp_path / "a"
    assert main(["ladder", *C, "--methods", "bp", "--seeds", "1", "--out", str(lad)]) == 0
    assert main(["audit", *C, "--methods", "bp", "--seeds", "1", "--out", str(aud)]) == 0
    trained = next(p for p in (aud / "runs").glob("*/result.json") if "_all_" in p.parent.name or "all" in
                   json.loads(p.read_text())["config"]["train_blocks"])
    rec = json.loads(trained.read_text())
    rec["final"]["test_acc"] = 0.5  # (the seal kept: the edit is what it no longer matches)
    trained.write_text(json.dumps(rec))
    assert main(["report", str(lad), "--audit-dir", str(aud)]) == 0
    md = (lad / "ladder_d8_L1_mnist1d.md").read_text()
    cross = md.partition("## Cross-check with the audit")[2]
    print(cross)
    assert "1 record(s) of the audit cannot be trusted, so none is compared" in cross
    assert str(trained.relative_to(aud)) in cross and "0.5" not in cross.split("record(s)")[0]


def test_a_default_device_of_meta_is_restored_from_a_plugin_and_refused_from_the_caller(tmp_path):
    """W3 (cases 43, 44): torch.set_default_device("meta") by a plug-in at import was an internal error (torch's
    "Cannot copy out of meta tensor"), and by the Python caller torch's NotImplementedError."""
    (tmp_path / "devplug.py").write_text("import torch\ntorch.set_default_device('meta')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(tmp_path)]), "OMP_NUM_THREADS": "1",
           "DEPTHAUDIT_CACHE_DIR": str(tmp_path / "cache")}
    p = subprocess.run([sys.executable, "-m", "depthaudit", "--plugin", "devplug", "train", *C[:8], "--out",
                        str(tmp_path / "t")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    print(p.returncode, p.stderr[-400:])
    assert p.returncode == 0 and "Traceback" not in p.stderr
    assert "depthaudit: note: a plug-in set torch's default device to meta at import; restored to cpu" in p.stderr
    code = ("import torch, depthaudit as da\ntorch.set_default_device('meta')\n"
            "try:\n    da.train(da.TrainConfig(dataset='mnist1d', d_hidden=8, num_blocks=1, epochs=1), 'py')\n"
            "except da.UsageError as e:\n    print(e)\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=600)
    print(p.stdout, p.stderr[-300:])
    assert p.stdout.strip() == ("torch's default device is meta (set by a plug-in or your code); depthaudit builds "
                                "models with real weights: torch.set_default_device(None) before the call")
    assert not (tmp_path / "py").exists()


SCRIPT = '''import sys
import depthaudit as da
from depthaudit.methods import METHODS
from depthaudit.methods.dfa import DFA

def register():
    @METHODS.register("g29")
    class G29(DFA):
        pass

if {top}:
    register()

if __name__ == "__main__":
    if not {top}:
        register()
    base = da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=1, epochs=1)
    cfg = da.AuditConfig(base=base, methods=("bp", "g29"), seeds=(1,), probe_batches=1, probe_batch_size=32)
    try:
        r = da.audit(cfg, sys.argv[1], sweep=da.SweepOptions(jobs=2), progress=False)
        print("OK", [m["method"] for m in r.record["methods"]])
    except da.UsageError as e:
        print("REFUSED", e)
'''


@pytest.mark.parametrize("top", [False, True])
def test_a_name_the_jobs_workers_cannot_see_is_refused_before_the_claim(tmp_path, top):
    """W5 (cases 79, 80): a method registered under the script's main guard failed in a worker as "unknown method
    'g29'; choose one of: bp, …" after the folder was claimed and a run trained; registered at the top level, the
    same sweep runs."""
    (tmp_path / "s.py").write_text(SCRIPT.format(top=top))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1",
           "DEPTHAUDIT_CACHE_DIR": str(tmp_path / "cache")}
    p = subprocess.run([sys.executable, str(tmp_path / "s.py"), str(tmp_path / "o")], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    print(p.stdout, p.stderr[-500:])
    if top:
        assert p.stdout.strip() == "OK ['bp', 'g29']"
    else:
        assert p.stdout.startswith("REFUSED method 'g29' is registered in this process but not in the --jobs worker")
        assert not (tmp_path / "o").exists()


def test_identity_out_dash_is_said_to_be_a_file(tmp_path, monkeypatch, capsys):
    """W6 (case 117): `identity --out -` noted "a folder named '-'" and wrote a file named '-'."""
    monkeypatch.chdir(tmp_path)
    assert main(["identity", "--dataset", "mnist1d", "--d-hidden", "8", "--num-blocks", "1", "--seeds", "1",
                 "--probe-batches", "1", "--probe-batch-size", "32", "--out", "-"]) == 0
    assert "--out - is a file named '-' here, not standard output" in capsys.readouterr().err
    assert (tmp_path / "-").is_file()


@pytest.mark.parametrize("code", [
    "import os\nos.makedirs('CHD', exist_ok=True)\nos.chdir('CHD')\n",
    "import torch\ntorch.set_default_dtype(torch.float64)\n",
    "import torch\ntorch.set_grad_enabled(False)\n",
])
def test_what_a_plugin_changes_at_import_is_undone_in_the_workers_too(tmp_path, code):
    """W8 (cases 145–149): the driver undid a plug-in's chdir, float64 default dtype or gradients-off at import,
    the --jobs 2 workers did not: runs landed in the plug-in's folder, a worker refused float64, a gradient-less
    worker was an internal error."""
    (tmp_path / "chplug.py").write_text(code)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(tmp_path)]), "OMP_NUM_THREADS": "1",
           "DEPTHAUDIT_CACHE_DIR": str(tmp_path / "cache")}
    p = subprocess.run([sys.executable, "-m", "depthaudit", "--plugin", "chplug", "audit", *C, "--methods", "bp", "fa",
                        "--seeds", "1", "--jobs", "2", "--out", "o"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=600)
    print(p.returncode, p.stderr[-600:])
    assert p.returncode == 0 and "Traceback" not in p.stderr and "missing" not in p.stderr
    assert p.stderr.count("depthaudit: note: a plug-in") == 1  # said once, by the driver
    assert len(list((tmp_path / "o" / "runs").glob("*/result.json"))) == 4
    assert not (tmp_path / "CHD" / "o").exists()


def test_a_foreign_record_over_a_stores_first_record_is_named_not_the_claim(tmp_path, capsys):
    """W7 (cases 134–142): a sealed record of an --lr 0.003 ladder copied over the --lr 0.001 ladder's first record
    (bp/k0/s1) made identity.json "edited" (and its advice ended in "move … away", every good record with it); over
    any later record it was named and retrained. Now the first is as any other."""
    lad, other = tmp_path / "l", tmp_path / "o"
    args = ["ladder", *C, "--methods", "bp", "fa", "--seeds", "1"]
    assert main([*args, "--out", str(lad)]) == 0
    assert main(["ladder", *C, "--methods", "bp", "--seeds", "1", "--lr", "0.003", "--out", str(other)]) == 0
    name = "ladder_d8_L1_mnist1d.runs/bp%2Fk0%2Fs1.json"
    (lad / name).write_bytes((other / name).read_bytes())
    capsys.readouterr()
    assert main(["report", str(lad)]) == 2
    err = capsys.readouterr().err
    print(err)
    assert f"{lad / name} was stored in a results file of another configuration (differs in: lr)" in err
    assert "identity.json differs" not in err
    assert main([*args, "--out", str(lad)]) == 0
    assert "3 of 4 runs already finished" in capsys.readouterr().err
    assert json.loads((lad / name).read_text())["config"]["lr"] == 0.001


def test_a_dangling_runs_link_or_a_file_at_runs_is_refused_before_the_claim(tmp_path, capsys):
    """W9 (cases 153, 154): OUT/runs a link to nowhere was refused after the audit's claim, which then refused
    another audit as "another audit"; a ladder's .runs a regular file, after its lock file was made."""
    a, lad = tmp_path / "a", tmp_path / "l"
    a.mkdir()
    lad.mkdir()
    (a / "runs").symlink_to(tmp_path / "nowhere" / "runs")
    (lad / "ladder_d8_L1_mnist1d.runs").write_text("")
    assert main(["audit", *C, "--methods", "bp", "--seeds", "1", "--out", str(a)]) == 2
    assert f"{a / 'runs'} is a symbolic link to {tmp_path / 'nowhere' / 'runs'}, which does not exist" in \
        capsys.readouterr().err
    assert main(["ladder", *C, "--methods", "bp", "--seeds", "1", "--out", str(lad)]) == 2
    assert f"{lad / 'ladder_d8_L1_mnist1d.runs'} is not a folder" in capsys.readouterr().err
    assert [p.name for p in a.iterdir()] == ["runs"]
    assert [p.name for p in lad.iterdir()] == ["ladder_d8_L1_mnist1d.runs"]


@pytest.mark.parametrize("make,field", [
    (lambda da: da.SaturationConfig(family="gpt", method="fa", extra=(0,)), "method"),
    (lambda da: da.GrowConfig(family="resnet", method="fa", extra=1), "method"),
    (lambda da: da.saturation(da.SaturationConfig(family="resnet", dataset="mnist1d", epochs=1, extra=(0,)),
                              "never", progress=False), "dataset"),
])
def test_the_depth_configs_refuse_in_keywords_from_python(tmp_path, monkeypatch, make, field):
    """W10 (cases 165, 166): "use saturation --family resmlp --method fa" and "(--family resmlp takes any dataset)"
    were said to Python callers; the CLI says the same with its flags."""
    import depthaudit as da

    monkeypatch.chdir(tmp_path)
    with pytest.raises(da.ConfigError) as exc:
        make(da)
    print(exc.value, "|", exc.value.render(cli=True))
    assert exc.value.field == field and "--" not in str(exc.value) and "family=resmlp" in str(exc.value)
    assert "--family resmlp" in exc.value.render(cli=True)
    assert not (tmp_path / "never").exists()


NET = '''import torch
from _util import TinyNet
from depthaudit.models import MODELS, ResidualAdapter

@MODELS.register("w29net")
def w29net(input_shape, num_classes, d_hidden=16, num_blocks=2, mlp_ratio=1, seed=0):
    torch.manual_seed(seed)
    net = TinyNet(int(torch.tensor(input_shape).prod()), d_hidden, num_blocks, num_classes)
    return ResidualAdapter(net, embed="stem", blocks="layers", readout="head", block_includes_residual=True)
'''

FAMILY = '''from torch import nn
from depthaudit.experiments.families import FAMILIES, DepthFamily

@FAMILIES.register("w29fam")
class W29Fam(DepthFamily):
    help = "walk 29 family"

    def build(self, run, data, device):
        return nn.Linear(40, 10).to(device)
'''


@pytest.mark.parametrize("plugin,args,said", [
    ("w29netplug", ["--family", "resmlp", "--arch", "w29net", "--d-hidden", "8"],
     "--arch w29net: saturation measures AG and V in a zero block's tangent space [ψ, 1]"),
    ("w29famplug", ["--family", "w29fam"], "--family w29fam ("),
])
def test_a_depth_sweep_a_plugin_cannot_measure_is_refused_before_any_run(tmp_path, plugin, args, said):
    """W11 (cases 173, 174): saturation of a plug-in model without a ResMLP block trained a depth, then was an
    internal error ("'_Delta' object has no attribute 'fc1'") and lost it; W13 (cases 184, 185): a plug-in family
    whose build() returned a Linear was refused after the store's claim, which then refused the next sweep."""
    (tmp_path / f"{plugin}.py").write_text(NET if plugin == "w29netplug" else FAMILY)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(tmp_path), str(ROOT / "tests")]),
           "OMP_NUM_THREADS": "1",
           "DEPTHAUDIT_CACHE_DIR": str(tmp_path / "cache")}
    p = subprocess.run([sys.executable, "-m", "depthaudit", "--plugin", plugin, "saturation", *args, "--dataset",
                        "mnist1d", "--epochs", "1", "--extra", "0", "--out", "o"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    print(p.returncode, p.stderr[-500:])
    assert p.returncode == 2 and "Traceback" not in p.stderr and "epoch" not in p.stderr
    assert said in p.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "o").exists()


OPTS = '''import os
from depthaudit.methods import METHODS, Option
from depthaudit.methods.dfa import DFA

if os.environ.get("W29OPT") == "mode":
    @METHODS.register("o29")
    class O29(DFA):
        options = {"mode": Option("plain", "mode", choices=("plain", "sign"))}

        def __init__(self, model, seed, mode="plain"):
            super().__init__(model, seed)
else:
    @METHODS.register("o29")
    class O29(DFA):
        options = {"k": Option(2, "an int option", lo=1)}

        def __init__(self, model, seed, k=2):
            super().__init__(model, seed)
'''


def test_a_plugin_whose_options_changed_since_its_runs_is_named(tmp_path):
    """W12 (cases 181, 182): after a plug-in method's options changed, `report` said the runs hold "a config this
    version cannot read; rerun the command" (refused by the new plug-in), and a smaller audit advised naming specs
    the loaded plug-in refuses."""
    (tmp_path / "w29opt.py").write_text(OPTS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(tmp_path)]), "OMP_NUM_THREADS": "1",
           "DEPTHAUDIT_CACHE_DIR": str(tmp_path / "cache")}

    def run(mode, *args):
        return subprocess.run([sys.executable, "-m", "depthaudit", "--plugin", "w29opt", *args], cwd=tmp_path,
                              env={**env, "W29OPT": mode}, capture_output=True, text=True, timeout=600)

    assert run("mode", "audit", *C, "--methods", "o29:mode=sign", "--seeds", "1", "--out", "a").returncode == 0
    p = run("k", "report", "a")
    last = p.stderr.strip().splitlines()[-1]
    print(last)
    assert p.returncode == 2 and "was trained by method 'o29' with options {'mode': 'sign'}, which the loaded " \
        f"plug-in w29opt ({tmp_path / 'w29opt.py'}) no longer takes (o29 has no option 'mode'" in last
    assert last.endswith("its code changed since; load the version that trained it, or write to a new --out")
    p = run("k", "audit", *C, "--methods", "o29", "--seeds", "1", "--out", "a")
    last = p.stderr.strip().splitlines()[-1]
    print(last)
    assert p.returncode == 2 and "it holds methods the loaded plug-ins no longer take as they were trained " \
        "(o29:mode=sign: o29 has no option 'mode'" in last and "name everything" not in last


def test_a_ladder_of_one_device_at_two_thread_counts_is_one_kind_of_device():
    """Unclear case 130: runs of 1 and 2 CPU threads were "more than one kind of device … two samples"."""
    from depthaudit.report.ladder import devices_md

    def run(threads):
        return {"provenance": {"device": f"cpu ({threads} thread{'s' * (threads > 1)}, x86_64)", "torch": "2.13.0"}}

    md = devices_md({"runs": {"bp/k0/s1": run(1), "bp/k1/s1": run(2)}})
    print(md)
    assert md.startswith("The runs trained on one kind of device with different thread counts")
    md = devices_md({"runs": {"bp/k0/s1": run(1), "bp/k1/s1": {"provenance": {"device": "cuda:0 (NVIDIA H100)",
                                                                               "torch": "2.13.0"}}}})
    assert md.startswith("The runs trained on more than one kind of device")


def test_one_fresh_b_draw_has_no_spread_and_no_warning(tmp_path, recwarn):
    """Unclear case 189: --fresh-b-draws 1 leaked torch's degrees-of-freedom warning onto stderr."""
    assert main(["audit", *C, "--methods", "fa", "--seeds", "1", "--functional", "--fresh-b-draws", "1",
                 "--out", str(tmp_path / "a")]) == 0
    assert not [w for w in recwarn if "degrees of freedom" in str(w.message)]
    fb = json.loads((tmp_path / "a" / "report.json").read_text())["methods"][0]["functional"]["fresh_b_null"]
    print(fb["null_std"])
    assert all(v["mean"] is None for v in fb["null_std"])
