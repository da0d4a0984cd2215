"""A ladder of the published protocol is read beside the published ladder; any other ladder is not."""

import json
import statistics
from pathlib import Path

import pytest

from depthaudit.report.ladder import ladder_report
from depthaudit.report.published import LADDER, published_ladder

STORED = Path(__file__).parent.parent / "docs" / "results" / "ladder_e100" / "ladder_d256_L4_cifar10.json"


def _copy(tmp_path: Path, **identity) -> Path:
    doc = json.loads(STORED.read_text(encoding="utf-8"))
    doc["identity"].update(identity)
    out = tmp_path / STORED.name
    out.write_text(json.dumps(doc), encoding="utf-8")
    return out


def _with_a_second_seed(path: Path) -> Path:
    """The stored ladder plus a seed-123 twin of every seed-42 run, 1 pp higher (a cell of n=2 seeds)."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    for key, run in list(doc["runs"].items()):
        if key.endswith("/s42"):
            twin = json.loads(json.dumps(run))
            twin["final"]["test_acc"] += 0.01
            twin["config"]["seed"] = 123
            doc["runs"][key[:-3] + "s123"] = twin
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


@pytest.mark.parametrize("seeds", ["as stored", "with a second seed"])
def test_the_protocols_ladder_gets_the_published_cells_and_deltas(tmp_path, seeds):
    path = _copy(tmp_path) if seeds == "as stored" else _with_a_second_seed(_copy(tmp_path))
    md, _ = ladder_report(path)
    assert "## Beside the published ladder" in md
    runs = json.loads(path.read_text(encoding="utf-8"))["runs"]
    rows = {line.split(" | ")[0].strip("| "): line for line in md.splitlines() if line.startswith("| ")}
    for k in range(5):
        cells = rows[str(k)].strip("| ").split(" | ")
        for i, m in enumerate(("bp", "fa-stream", "dfa")):
            accs = [r["final"]["test_acc"] for key, r in runs.items() if key.startswith(f"{m}/k{k}/s")]
            ours = statistics.mean(accs)  # over the seeds stored (42 first; more as they are trained)
            n = len(accs)
            mine = f"{ours:.3f} (n=1)" if n == 1 else f"{ours:.3f} ± {statistics.stdev(accs):.3f} (n={n})"
            mean, std = LADDER[(256, 4)][m][k]
            want = f"{100 * (ours - mean):+.1f}"  # Δ pp, computed here from the stored records and the table
            assert cells[1 + 3 * i:4 + 3 * i] == [mine, f"{mean:.3f} ± {std:.3f} (n=3)", want], (k, m)
    print("bp k=0:", rows["0"].split(" | ")[1:4])
    assert "| bp (BP) | yes / yes | k=4 / k=4 |" in md  # BP climbs monotonically, in ours and in the published


def test_another_configuration_is_not_read_beside_the_published_one(tmp_path):
    for change in ({"epochs": 30}, {"augment": "none"}, {"dataset": "cifar100"}, {"scale_penalty": 0.01},
                   {"d_hidden": 128}, {"variant": "v0.1"}):
        md, _ = ladder_report(_copy(tmp_path, **change))
        assert "published" not in md, change
        assert published_ladder({**json.loads(STORED.read_text(encoding="utf-8"))["identity"], **change}) is None


def test_the_figure_draws_each_published_series_beside_ours(tmp_path, monkeypatch):
    import depthaudit.report.ladder as lr

    figs = []
    monkeypatch.setattr(lr, "save_figure", lambda fig, path: figs.append(fig))
    ladder_report(_copy(tmp_path))
    ladder_report(_copy(tmp_path, epochs=30))
    with_pub, without = ([tuple(round(float(v), 3) for v in ln.get_ydata()) for ln in f.axes[0].lines] for f in figs)
    for m, cells in LADDER[(256, 4)].items():
        pub = tuple(mean for mean, _ in cells)
        assert pub in with_pub and pub not in without, m
    labels = [t.get_text() for t in figs[0].axes[0].get_legend().get_texts()]
    assert {"BP, published", "FA, published", "DFA, published"} <= set(labels)


def test_a_ladder_of_runs_from_two_devices_says_which_cell_trained_where(tmp_path):
    path = _copy(tmp_path)
    doc = json.loads(path.read_text(encoding="utf-8"))
    # the 15 runs of the H200 session alone (the stored file may since hold CPU runs too)
    doc["runs"] = {key: r for key, r in doc["runs"].items() if r["provenance"]["device"].startswith("cuda")}
    assert len(doc["runs"]) == 15
    path.write_text(json.dumps(doc), encoding="utf-8")
    md, _ = ladder_report(path)  # one device: one line
    assert "Every run (15) trained on cuda:0 (NVIDIA H200), torch 2.11.0+cu130." in md
    for k in (1, 3):  # two fa-stream rungs as if trained on a CPU
        doc["runs"][f"fa-stream/k{k}/s42"]["provenance"].update(device="cpu", torch="2.13.0+cpu")
    path.write_text(json.dumps(doc), encoding="utf-8")
    md, _ = ladder_report(path)
    sec = md.split("## Where the runs trained")[1].split("##")[0]
    print(sec)
    cpu = [ln for ln in sec.splitlines() if ln.startswith("- cpu, torch 2.13.0+cpu")]
    gpu = [ln for ln in sec.splitlines() if ln.startswith("- cuda:0 (NVIDIA H200), torch 2.11.0+cu130")]
    assert cpu == ["- cpu, torch 2.13.0+cpu (2 runs): fa-stream k1/s42, k3/s42"]
    assert len(gpu) == 1 and "(13 runs)" in gpu[0] and "k1/s42" not in gpu[0].split("fa-stream")[1].split(";")[0]
    assert "two samples" in sec
