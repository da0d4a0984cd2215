"""The parameter-matched shallow baseline: its width is the nearest match, checked against a closed form."""

import json

from depthaudit.cli import main
from depthaudit.config import TrainConfig
from depthaudit.experiments.shallow import matched_shallow, param_count


def closed_form(n_in: int, classes: int, d: int, blocks: int, r: int = 1) -> int:
    """Reference ResMLP by hand: embed, L × (LN γβ, fc1, fc2), out LN γβ, head."""
    return n_in * d + d + blocks * (2 * d + d * r * d + r * d + r * d * d + d) + 2 * d + d * classes + classes


def test_param_count_is_the_closed_form():
    cfg = TrainConfig(dataset="cifar10")
    for d, blocks in [(256, 4), (17, 1), (512, 2)]:
        assert param_count(cfg, (3, 32, 32), 10, d, blocks) == closed_form(3072, 10, d, blocks)


def test_matched_width_is_the_nearest_integer_and_within_2_percent():
    cfg = TrainConfig(dataset="cifar10", d_hidden=256, num_blocks=4)
    for blocks in (1, 2, 3):
        m = matched_shallow(cfg, (3, 32, 32), 10, blocks)
        target = closed_form(3072, 10, 256, 4)
        assert m["full_params"] == target and m["params"] == closed_form(3072, 10, m["d_hidden"], blocks)
        here = abs(m["params"] - target)
        for w in (m["d_hidden"] - 1, m["d_hidden"] + 1):
            assert abs(closed_form(3072, 10, w, blocks) - target) >= here
        print(f"L'={blocks}: d'={m['d_hidden']}, {m['params']} vs {target} ({m['match_pct']:+.3f} %)")
        assert abs(m["match_pct"]) <= 2.0


def test_audit_reports_the_shallow_baseline(tmp_path):
    out = tmp_path / "a"
    assert main(["audit", "--methods", "fa", "--epochs", "1", "--d-hidden", "32", "--num-blocks", "3",
                 "--probe-batches", "1", "--probe-batch-size", "64", "--shallow-baseline", "--out", str(out)]) == 0
    rep = json.loads((out / "report.json").read_text())
    sh = rep["methods"][0]["shallow"]
    assert sh["num_blocks"] == 1 and abs(sh["match_pct"]) <= 2.0 and sh["test_acc"]["n"] == 1
    assert "trained − shallow pp" in (out / "report.md").read_text()
    run = json.loads((out / "runs" / sh["runs"][0] / "result.json").read_text())
    assert run["config"]["num_blocks"] == 1 and run["config"]["d_hidden"] == sh["d_hidden"]
    assert main(["audit", "--shallow-baseline", "--shallow-blocks", "2", "--num-blocks", "2",
                 "--out", str(tmp_path / "b")]) == 2


def test_ladder_adds_the_shallow_row_and_report_rebuilds_it(tmp_path, capsys):
    out = tmp_path / "lad"
    argv = ["ladder", "--dataset", "mnist1d", "--d-hidden", "32", "--num-blocks", "3", "--methods", "fa",
            "--k-values", "0", "3", "--seeds", "1", "--epochs", "1", "--probe-batches", "1", "--probe-batch-size",
            "64", "--out", str(out), "--shallow-baseline"]
    assert main(argv) == 0
    doc = json.loads((out / "ladder_d32_L3_mnist1d.json").read_text())
    assert set(doc["runs"]) == {"fa/k0/s1", "fa/k3/s1", "fa/shallow/s1"}
    assert doc["runs"]["fa/shallow/s1"]["config"]["num_blocks"] == 1
    md = (out / "ladder_d32_L3_mnist1d.md").read_text()
    assert "| matched shallow, L=1 d=" in md
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    assert "| matched shallow, L=1 d=" in capsys.readouterr().out
