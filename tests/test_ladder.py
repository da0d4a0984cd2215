"""Depth ladder and the sweep runner: resumable after a real kill, atomic file, refusal, aggregation, report."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from depthaudit.cli import main
from depthaudit.experiments.ladder import aggregate
from depthaudit.report.ladder import ladder_table_md

LADDER = ["ladder", "--dataset", "mnist1d", "--d_hidden", "48", "--num_blocks", "2", "--methods", "bp", "dfa",
          "--k_values", "0", "1", "2", "--seeds", "1", "2", "--epochs", "2", "--probe-batches", "1",
          "--probe-batch-size", "64", "--device", "cpu"]
FILE = "ladder_d48_L2_mnist1d.json"


def _env(tmp_path):
    return {**os.environ, "DEPTHAUDIT_CACHE_DIR": str(tmp_path / "cache")}


def _strip(doc):
    """Everything but wall-clock fields."""
    doc = json.loads(json.dumps(doc))
    doc.pop("record_sha256", None)  # (the file's seal: a digest of the wall-clock fields too)
    for rec in doc["runs"].values():
        rec["provenance"].pop("started_at")
        rec["provenance"].pop("written_at", None)
        rec["provenance"].pop("argv")
        rec.pop("timing")
        for h in rec["history"]:
            h.pop("seconds")
    return doc


def test_kill_after_first_run_then_resume_equals_uninterrupted(tmp_path):
    env = _env(tmp_path)
    cli = [sys.executable, "-m", "depthaudit.cli"]
    # uninterrupted reference
    subprocess.run([*cli, *LADDER, "--output_dir", str(tmp_path / "ref")], env=env, check=True,
                   capture_output=True, timeout=600)
    ref = json.loads((tmp_path / "ref" / FILE).read_text())
    assert len(ref["runs"]) == 12
    # interrupted: a real SIGKILL as soon as the first run is in the file; every read must be valid JSON
    out = tmp_path / "killed"
    proc = subprocess.Popen([*cli, *LADDER, "--output_dir", str(out)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    path, reads, n_at_kill = out / FILE, 0, None
    deadline = time.time() + 300
    while time.time() < deadline:
        if path.exists():
            doc = json.loads(path.read_text())  # raises if a half-written file were ever visible
            reads += 1
            if doc["runs"]:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                n_at_kill = len(json.loads(path.read_text())["runs"])
                break
        time.sleep(0.005)
    assert n_at_kill is not None and 1 <= n_at_kill < 12, n_at_kill
    print(f"killed with {n_at_kill}/12 runs stored after {reads} valid reads")
    p = subprocess.run([*cli, *LADDER, "--output_dir", str(out)], env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr
    assert f"{n_at_kill} of 12 runs already finished" in p.stderr
    assert p.stderr.count("runs  elapsed") == 12 - n_at_kill  # only the remainder trained
    resumed = json.loads(path.read_text())
    assert _strip(resumed) == _strip(ref)
    # a third invocation trains nothing
    p = subprocess.run([*cli, *LADDER, "--output_dir", str(out)], env=env, capture_output=True, text=True,
                       timeout=600)
    assert "12 of 12 runs already finished" in p.stderr and "runs  elapsed" not in p.stderr


def test_config_mismatch_is_refused(tmp_path, capsys):
    args = [*LADDER[:10], "--k_values", "0", "--seeds", "1", "--epochs", "1", "--probe-batches", "1",
            "--probe-batch-size", "32", "--device", "cpu", "--output_dir", str(tmp_path)]
    assert main(args) == 0
    before = (tmp_path / FILE).read_text()
    args[args.index("--epochs") + 1] = "3"
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "different configuration" in err and "epochs" in err
    assert (tmp_path / FILE).read_text() == before


def test_bad_ladder_input(tmp_path, capsys):
    assert main([*LADDER[:9], "--k_values", "0", "5", "--output_dir", str(tmp_path / "x")]) == 2
    assert "--k-values 5:" in capsys.readouterr().err and not (tmp_path / "x").exists()
    # the seed harness's verbatim command parses; without CUDA it fails in one clear line
    code = main(["ladder", "--d_hidden", "256", "--num_blocks", "4", "--methods", "bp", "fa", "dfa", "--k_values",
                 "0", "1", "2", "3", "4", "--seeds", "42", "123", "456", "--epochs", "100", "--gpu", "0",
                 "--output_dir", str(tmp_path / "h")])
    err = capsys.readouterr().err.strip()
    import torch

    if not torch.cuda.is_available():
        assert code == 2 and "--device cuda:0" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "h").exists() or torch.cuda.is_available()


def test_cifar_missing_suggests_data_dir_or_mnist1d(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DEPTHAUDIT_CACHE_DIR", str(tmp_path / "empty_cache"))
    assert main(["ladder", "--device", "cpu", "--output_dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "--data-dir" in err and "--dataset mnist1d" in err and not (tmp_path / "o").exists()


def _doc(values, L=2):
    runs = {}
    for (m, k), accs in values.items():
        for i, a in enumerate(accs):
            runs[f"{m}/k{k}/s{i}"] = {"final": {"test_acc": a}, "status": "ok", "history": []}
    return {"identity": {"num_blocks": L}, "runs": runs}


def test_aggregation_on_known_numbers():
    agg = aggregate(_doc({("bp", 0): [0.5, 0.6, 0.7], ("bp", 1): [0.7, 0.7, 0.7], ("bp", 2): [0.8, 0.9, 1.0],
                          ("dfa", 0): [0.4, 0.4], ("dfa", 1): [0.5, 0.3], ("dfa", 2): [0.35, 0.35]}))
    bp0 = agg["table"]["bp"][0]
    assert bp0["mean"] == pytest.approx(0.6) and bp0["std"] == pytest.approx(0.1) and bp0["n"] == 3
    assert agg["table"]["dfa"][1]["std"] == pytest.approx(0.1414213562)  # ddof 1: sqrt(0.02)
    assert agg["helpers"]["bp"] == {"max_rung": 2, "monotone": True, "gain_pp_k0_to_kL": pytest.approx(30.0)}
    assert agg["helpers"]["dfa"]["monotone"] is False and agg["helpers"]["dfa"]["gain_pp_k0_to_kL"] == pytest.approx(-5)
    table = ladder_table_md(agg)
    assert "| 0 | 0.600 ± 0.100 (n=3) | 0.400 ± 0.000 (n=2) |" in table


def test_reading_beside_the_matched_shallow_model_on_known_numbers():
    from depthaudit.report.ladder import helpers_md

    doc = _doc({("bp", 0): [0.4, 0.5], ("bp", 2): [0.7, 0.8], ("fa", 0): [0.3], ("dfa", 0): [0.4], ("dfa", 2): [0.3]})
    for i, a in enumerate((0.6, 0.7)):  # bp's shallow model: mean 0.65 against k=L's 0.75 -> +10.0 pp
        doc["runs"][f"bp/shallow/s{i}"] = {"final": {"test_acc": a}, "status": "ok", "history": [],
                                           "config": {"num_blocks": 1, "d_hidden": 99}}
    doc["runs"]["dfa/shallow/s0"] = {"final": {"test_acc": 0.35}, "status": "ok", "history": [],
                                     "config": {"num_blocks": 1, "d_hidden": 99}}
    md = helpers_md(aggregate(doc))
    print(md)
    rows = {ln.split(" | ")[0].strip("| "): ln.strip("| ").split(" | ") for ln in md.splitlines()[2:]}
    assert md.splitlines()[0].endswith("| k=2 − matched shallow (pp) |")
    assert rows["bp"] == ["bp", "+30.0", "yes", "k=2", "+10.0"]
    assert rows["dfa"] == ["dfa", "-10.0", "no", "k=0", "-5.0"]
    assert rows["fa"] == ["fa", "—", "— (one rung)", "k=0", "—"]  # one rung, no shallow run: nothing to read
    assert "shallow" not in helpers_md(aggregate(_doc({("bp", 0): [0.4], ("bp", 2): [0.7]})))


def test_report_rebuilds_the_table_from_json_alone(tmp_path, capsys):
    args = [*LADDER[:9], "--k_values", "0", "2", "--seeds", "1", "--epochs", "1", "--probe-batches", "1",
            "--probe-batch-size", "32", "--device", "cpu", "--output_dir", str(tmp_path)]
    assert main(args) == 0
    first = capsys.readouterr().out
    md = (tmp_path / FILE.replace(".json", ".md")).read_text()
    (tmp_path / FILE.replace(".json", ".md")).unlink()
    (tmp_path / FILE.replace(".json", ".png")).unlink()
    os.environ.pop("NO_SUCH", None)
    assert main(["report", str(tmp_path)]) == 0
    again = capsys.readouterr().out
    assert (tmp_path / FILE.replace(".json", ".md")).read_text() == md
    assert (tmp_path / FILE.replace(".json", ".png")).exists()
    table = [line for line in first.splitlines() if line.startswith("|")]
    assert table and all(line in again for line in table)
    assert main(["report", str(tmp_path / "nope")]) == 2


def test_parallel_jobs_give_the_same_results_as_sequential(tmp_path):
    env = _env(tmp_path)
    cli = [sys.executable, "-m", "depthaudit.cli"]
    small = [*LADDER[:9], "--k_values", "0", "2", "--seeds", "1", "--epochs", "1", "--probe-batches", "1",
             "--probe-batch-size", "32", "--device", "cpu"]
    docs = []
    for jobs, sub in (("1", "seq"), ("2", "par")):
        p = subprocess.run([*cli, *small, "--jobs", jobs, "--output_dir", str(tmp_path / sub)], env=env,
                           capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-2000:]
        assert "[####################] 2/2 runs" in p.stderr
        docs.append(_strip(json.loads((tmp_path / sub / FILE).read_text())))
    for d in docs:  # argv differs between the two invocations by design
        for rec in d["runs"].values():
            rec["provenance"].pop("device", None)
    assert docs[0]["runs"].keys() == docs[1]["runs"].keys()
    # workers run with 1 thread, the sequential run with 2: matmul reduction order differs, so numbers agree
    # to float rounding, not bit for bit
    for k in docs[0]["runs"]:
        a, b = docs[0]["runs"][k], docs[1]["runs"][k]
        assert a["config"] == b["config"]
        fa, fb = ({k2: v for k2, v in f.items() if v is not None} for f in (a["final"], b["final"]))
        assert fa == pytest.approx(fb, rel=1e-4, abs=1e-6), k
        assert a["history"][-1]["train_loss"] == pytest.approx(b["history"][-1]["train_loss"], rel=1e-4)


def test_a_run_stored_from_another_device_is_named_not_reused(tmp_path, capsys):
    """A ladder file may mix devices; a cell stored from a GPU is listed as such on a CPU and retrained there."""
    from urllib.parse import quote

    from depthaudit.stores import seal, unsealed

    args = [*LADDER[:9], "--k_values", "0", "1", "--seeds", "1", "--epochs", "1", "--probe-batches", "1",
            "--probe-batch-size", "32", "--device", "cpu", "--output_dir", str(tmp_path)]
    assert main(args) == 0
    rec_path = tmp_path / (FILE[:-5] + ".runs") / (quote("bp/k1/s1", safe="") + ".json")
    rec = unsealed(json.loads(rec_path.read_text()))
    rec["config"]["device"] = "cuda:0"  # as if trained on a GPU (resealed: an intact record)
    rec_path.write_text(json.dumps(seal(rec)))
    capsys.readouterr()
    assert main([*args, "--list-cells"]) == 0
    lines = {ln.split("\t")[1]: ln.split("\t")[2] for ln in capsys.readouterr().out.splitlines() if "\t" in ln}
    print(lines)
    assert lines["bp/k0/s1"] == "done"
    assert lines["bp/k1/s1"] == "pending (a cuda:0 run is stored; not reused on cpu)"
    assert main(args) == 0  # trains that one cell again, here, and says it replaces the GPU run
    err = capsys.readouterr().err
    assert "bp/k1/s1: the stored run trained on cuda:0; it is not reused on cpu" in err
    assert json.loads(rec_path.read_text())["config"]["device"] == "cpu"
    assert main([*args, "--list-cells"]) == 0
    assert "pending" not in capsys.readouterr().out
