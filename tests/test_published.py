"""A ladder of the published protocol is read beside the published ladder; any other ladder is not."""

import json
from pathlib import Path

from depthaudit.report.ladder import ladder_report
from depthaudit.report.published import LADDER, published_ladder

STORED = Path(__file__).parent.parent / "docs" / "results" / "ladder_e100" / "ladder_d256_L4_cifar10.json"


def _copy(tmp_path: Path, **identity) -> Path:
    doc = json.loads(STORED.read_text(encoding="utf-8"))
    doc["identity"].update(identity)
    out = tmp_path / STORED.name
    out.write_text(json.dumps(doc), encoding="utf-8")
    return out


def test_the_protocols_ladder_gets_the_published_cells_and_deltas(tmp_path):
    md, _ = ladder_report(_copy(tmp_path))
    assert "## Beside the published ladder" in md
    runs = json.loads(STORED.read_text(encoding="utf-8"))["runs"]
    rows = {line.split(" | ")[0].strip("| "): line for line in md.splitlines() if line.startswith("| ")}
    for k in range(5):
        cells = rows[str(k)].strip("| ").split(" | ")
        for i, m in enumerate(("bp", "fa-stream", "dfa")):
            ours = runs[f"{m}/k{k}/s42"]["final"]["test_acc"]
            mean, std = LADDER[(256, 4)][m][k]
            want = f"{100 * (ours - mean):+.1f}"  # Δ pp, computed here from the stored record and the table
            assert cells[1 + 3 * i:4 + 3 * i] == [f"{ours:.3f} (n=1)", f"{mean:.3f} ± {std:.3f} (n=3)", want], (k, m)
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
