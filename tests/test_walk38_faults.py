"""Walk 38's wrong cases, reproduced as the walker did them (docs/walks/walk38_*.txt).

W1 and W2 (a --stop-on-flag run stopped at init: D3 "+nan FLAG", report calling the report edited) were walk 37's
W4 too: tests/test_walk37_faults.py::test_runs_stopped_at_init_report_again covers both.
"""

import json

from test_walk36_faults import noisy  # noqa: F401 (the fixture: extending.md's plug-in method, as a file)

from depthaudit.cli import main


def test_saturation_records_name_the_plugin_that_trained_them(tmp_path, noisy):  # noqa: F811
    """W3 (cases 234, 235): the run records of `saturation --method <a plug-in's>` had no provenance.plugins,
    where grow's, probes', ladder's, audit's and train's name the plug-in (cli.md: every result's provenance)."""
    out = tmp_path / "S"
    assert main(["--plugin", noisy, "saturation", "--family", "resmlp", "--method", "noisy36", "--dataset",
                 "mnist1d", "--d-hidden", "16", "--epochs", "1", "--extra", "0", "--out", str(out)]) == 0
    doc = json.loads(next(out.glob("saturation_*.json")).read_text())
    mods = [[p["module"] for p in r["provenance"].get("plugins") or []] for r in doc["runs"].values()]
    assert mods == [[noisy]], mods
    assert main(["saturation", "--family", "resmlp", "--dataset", "mnist1d", "--d-hidden", "16", "--epochs", "1",
                 "--extra", "0", "--out", str(tmp_path / "plain")]) == 0
    doc = json.loads(next((tmp_path / "plain").glob("saturation_*.json")).read_text())
    assert all("plugins" not in r["provenance"] for r in doc["runs"].values())
