"""One feedback-state implementation (CreditMethod.state_dict/load_state_dict/to) reads checkpoints as written.

The literals below are the ``"method"`` entry of a checkpoint.pt as the per-method state_dicts wrote it before
the state was declared (``state_tensors``/``state_counters``): resmlp d=4, L=1, C=5, ratio 2.
"""

import pytest
import torch

from depthaudit.errors import UsageError
from depthaudit.methods import build_method
from depthaudit.models import build_model


def _t(*shape, v=0.5):
    return torch.full(shape, v)


STORED = {
    "fa": {"block1.fc1": _t(8, 4), "block1.fc2": _t(4, 8), "readout.out_head": _t(5, 4)},
    "kp": {"block1.fc1": _t(8, 4), "block1.fc2": _t(4, 8), "readout.out_head": _t(5, 4)},
    "pfa": {"block1.fc1": _t(32, 4), "block1.fc2": _t(16, 8), "readout.out_head": _t(20, 4),
            "block1.fc1.R": _t(8, 32, v=2.0), "block1.fc2.R": _t(4, 16, v=2.0), "readout.out_head.R": _t(5, 20, v=2.0)},
    "wm": {"block1.fc1": _t(8, 4), "block1.fc2": _t(4, 8), "readout.out_head": _t(5, 4),
           "readout.mirror_step": torch.tensor(7)},
    "fg": {"readout.tangent_step": torch.tensor(3)},
    "dfa": {"B0": _t(4, 5), "B1": _t(4, 5)},
    "fa-stream": {"B1": _t(4, 4)},
}


@pytest.mark.parametrize("name", sorted(STORED))
def test_checkpoint_state_loads_and_round_trips(name, tmp_path):
    torch.save({"method": STORED[name]}, tmp_path / "checkpoint.pt")
    stored = torch.load(tmp_path / "checkpoint.pt", weights_only=True)["method"]
    method = build_method(name, build_model("resmlp", (7,), 5, 4, 1, 2, 0), 0)
    method.load_state_dict(stored)
    back = method.state_dict()
    assert back.keys() == STORED[name].keys()
    assert all(torch.equal(back[k], v) for k, v in STORED[name].items())
    if name == "pfa":  # Q (<key>.R) went to the expansion, P to the feedback
        assert torch.equal(method.expansion["block1.fc1"], _t(8, 32, v=2.0))
    assert getattr(method, "t", None) == {"wm": 7, "fg": 3}.get(name)


@pytest.mark.parametrize("name", ["fa", "pfa"])
def test_a_misfit_state_is_one_clear_error(name):
    method = build_method(name, build_model("resmlp", (7,), 5, 4, 1, 2, 0), 0)
    wrong = {**method.state_dict(), "block1.fc1": _t(3, 3)}
    with pytest.raises(UsageError) as exc:
        method.load_state_dict(wrong)
    assert "\n" not in str(exc.value) and "block1.fc1 is (3, 3)" in str(exc.value)
    missing = {k: v for k, v in method.state_dict().items() if k != "readout.out_head"}
    with pytest.raises(UsageError, match="readout.out_head is missing"):
        method.load_state_dict(missing)
