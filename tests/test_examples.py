"""The plug-in API as a user meets it: the examples run (short), from Python and through --plugin."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _run(args, tmp_path):
    env = {**os.environ, "DEPTHAUDIT_CACHE_DIR": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.parametrize("example", ["custom_method", "custom_model"])
def test_example_runs(example, tmp_path):
    p = _run([f"examples/{example}.py", "--epochs", "1", "--out", str(tmp_path / "o")], tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "Standard pair vs protocol" in p.stdout
    assert len(list((tmp_path / "o" / "runs").glob("*/result.json"))) == 4


def test_plugin_flag_registers_user_method_for_the_cli(tmp_path):
    p = _run(["-m", "depthaudit.cli", "--plugin", "examples.custom_method", "train", "--method", "noisy_bp",
              "--d-hidden", "16", "--num-blocks", "2", "--epochs", "1", "--out", str(tmp_path / "r")], tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads((tmp_path / "r" / "result.json").read_text())["config"]["method"] == "noisy_bp"


def test_adapter_matches_the_users_forward_and_fa_explains_what_it_needs():
    sys.path.insert(0, str(ROOT))
    from examples.custom_model import conv1d_resnet

    from depthaudit.errors import UsageError
    from depthaudit.methods import build_method

    model = conv1d_resnet((40,), 10, 8, 3, 4, 0)
    x = torch.randn(5, 40)
    logits, states = model(x, return_states=True)
    user = model.embed.__class__  # the adapter shares the user's modules
    assert user is torch.nn.Sequential and len(states) == 4
    h = model.embed(x)
    for b in model.blocks:
        h = b.block(h)  # the user's own blocks, with their own skip connection
    assert torch.allclose(model.readout(h), logits, atol=1e-6)
    with pytest.raises(UsageError, match="feedback_weights"):
        build_method("fa", model, 0)
    build_method("dfa", model, 0)
