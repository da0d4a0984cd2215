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
