"""Reports say what ran: titles from each row's own record, cells that never contradict their verdict."""

import pytest

from depthaudit.report.card import _check, _title
from depthaudit.verdicts import Thresholds, check_cells, check_d1, check_d2, check_d3


def _report(labels, **base):
    b = {"dataset": "cifar10", "arch": "resmlp", "variant": "ref", "d_hidden": 8, "num_blocks": 2, "epochs": 1,
         "fa_head": "feedback", "fa_stream_identity": False, **base}  # the base config's legacy flat keys
    return {"config": {"base": b, "methods": list(labels), "seeds": [1], "probe_batches": 1, "probe_batch_size": 8},
            "methods": [{"method": m} for m in labels]}


def test_title_reads_each_rows_own_label_never_the_base_config():
    title = _title(_report(["bp", "fa:head=exact", "fa-stream:identity"]))
    print(title)
    assert "fa head feedback" not in title and "no identity" not in title  # neither ran
    assert "fa-stream:identity: scale 1" in title and "fa:head=exact" not in title.partition(";")[2]
    title = _title(_report(["fa", "fa-stream"]))
    print(title)
    assert title.endswith("; fa: head feedback; fa-stream: identity no, scale 1")
    assert _title(_report(["exotic:x=1"])).endswith("probe 1×8")  # an unregistered method: no words, no crash


TH = Thresholds()


@pytest.mark.parametrize("gap,status", [(1.95, "FLAG"), (1.96, "FLAG"), (1.9999, "FLAG"), (2.0, "PASS"),
                                        (2.0001, "PASS"), (2.05, "PASS")])
def test_d3_cell_never_reads_as_the_other_side_of_2pp(gap, status):
    c = check_d3(gap, TH)
    v, m = check_cells(c, "+.1f")
    print(gap, _check(c, "+.1f"))
    assert c["status"] == status
    assert (float(v) < TH.gap_min_pp) == (status == "FLAG")  # the printed value is on its verdict's side
    assert (float(m) < 0) == (status == "FLAG")  # and the margin's sign agrees
    if gap == 2.0:
        assert v == f"{gap:+.1f}"  # on the threshold exactly: the usual one decimal
    assert abs(float(v) - float(m) - TH.gap_min_pp) < 1e-9 + 0.5 * 10 ** -len(v.split(".")[1])  # the pair adds up
    # to the 2 pp floor as printed (walk 25 case 40: "+1.4 FLAG (-0.7)"; 2.05 prints "+2.05 (+0.05)")


@pytest.mark.parametrize("rho", [49.96, 50.0, 50.04, 50.4])
def test_d1_cell_at_its_threshold(rho):
    c = check_d1(rho, TH)
    v, m = check_cells(c, ".3g")
    print(rho, _check(c, ".3g"))
    assert (float(v) > TH.rho_max) == (c["status"] == "FLAG") and (float(m) < 0) == (c["status"] == "FLAG")


@pytest.mark.parametrize("g", [0.996e-7, 1e-7, 1.004e-7])
def test_d2_cell_at_its_threshold(g):
    c = check_d2(g, TH)
    v, m = check_cells(c, ".2e")
    print(g, _check(c, ".2e"))
    limit = TH.ref_factor * TH.eps
    assert (float(v) < limit) == (c["status"] == "FLAG") and (float(m) < 0) == (c["status"] == "FLAG")


def test_report_without_the_plugin_of_a_section_says_the_section_needs_it(tmp_path, capsys):
    import json

    import depthaudit as da
    from depthaudit.cli import main
    from depthaudit.diagnostics import MEASUREMENT_KEY
    from depthaudit.stores import seal, unsealed

    out = tmp_path / "a"
    cfg = da.AuditConfig(base=da.TrainConfig(dataset="mnist1d", d_hidden=8, num_blocks=1, epochs=1), methods="bp",
                         seeds=(1,), probe_batches=1, probe_batch_size=32)
    res = da.audit(cfg, out, progress=False)
    assert main(["report", str(out)]) == 0
    assert "plug-in" not in capsys.readouterr().err  # every quantity rendered: nothing to say
    slug = res.record["methods"][0]["runs"]["trained"][0]
    path = out / "runs" / slug / "result.json"
    rec = unsealed(json.loads(path.read_text()))
    rec["history"][-1][MEASUREMENT_KEY]["my_plugin_quantity"] = {"x": 1.0}  # as a plug-in's diagnostic stores it
    path.write_text(json.dumps(seal(rec)))
    assert main(["report", str(out)]) == 0
    err = capsys.readouterr().err
    print(err)
    assert "the runs measured my_plugin_quantity" in err and "--plugin" in err
