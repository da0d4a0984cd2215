"""The one-backward step (methods/onebackward.py) = the generic recipe path, for every credit-linear method.

The reference is each method's generic path (``fast = False``: trace, credits, then each block's local backward,
SPEC §2), itself tested against autograd and closed forms in tests/test_methods.py and tests/test_fa_stream.py.
Every comparison also checks that the one-backward path really ran (a law compared with itself proves nothing).
"""

from dataclasses import replace

import pytest
import torch
from test_methods import _grads, _setup, _step_grads

from depthaudit.methods import BP, FA, build_method, onebackward, parse_method_spec
from depthaudit.recipe import Penalty

SPECS = ["fa", "fa:head=exact", "usf", "frsf", "brsf", "kp", "fa-stream", "fa-stream:identity,scale=0.7"]


@pytest.fixture
def fast_calls(monkeypatch):
    """Counts the one-backward steps taken."""
    calls = []
    real = onebackward.step
    monkeypatch.setattr(onebackward, "step", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


def _pair(spec, model):
    """The same method twice (same seed, same options): the first takes the fast path, the second the generic."""
    from depthaudit.config import TrainConfig

    name, cfg = parse_method_spec(spec, TrainConfig(dataset="mnist1d"))
    fast, slow = (build_method(name, model, 0, cfg=cfg) for _ in range(2))
    slow.fast = False
    return fast, slow


def _worst(got, want):
    return max(((got[n] - want[n]).abs().max() / want[n].abs().max()).item() for n in want)


@pytest.mark.parametrize("arch", ["resmlp", "studentnet"])
@pytest.mark.parametrize("frozen", [(), (1,), (0, 2), (1, 2, 3)])
@pytest.mark.parametrize("spec", SPECS)
def test_one_backward_equals_the_generic_step_fp64(spec, frozen, arch, fast_calls):
    """Frozen embedding (0) or blocks (1..L); a second step onto the gradients of the first adds to them."""
    model, x, y = _setup(arch, seed=7)
    mods = [model.embed, *model.blocks]
    for i in frozen:
        mods[i].requires_grad_(False)
    fast, slow = _pair(spec, model)
    want = _step_grads(slow, model, x, y)
    assert not fast_calls
    got = _step_grads(fast, model, x, y)
    assert len(fast_calls) == 1
    worst = _worst(got, want)
    model.zero_grad(set_to_none=True)
    fast.step(model, x, y)
    fast.step(model, x, y)  # onto existing gradients: rescaled inside the backward, so the fast path adds to them
    assert len(fast_calls) == 3
    worst2 = _worst(_grads(model), {n: 2 * g for n, g in want.items()})
    print(f"{spec} {arch} frozen {frozen}: one-backward vs generic max rel diff {worst:.2e}; "
          f"two steps vs 2x one {worst2:.2e}")
    assert set(got) == set(want) and worst < 1e-12 and worst2 < 1e-12
    assert not any(n.startswith(("embed." if 0 in frozen else "-", *(f"blocks.{i - 1}." for i in frozen if i)))
                   for n in got)


@pytest.mark.parametrize("spec", ["fa", "kp", "fa-stream"])
def test_the_penalty_takes_the_generic_path(spec, fast_calls):
    """λ > 0 needs the surrogate itself: the generic path, for either penalty form."""
    model, x, y = _setup("resmlp", seed=8)
    fast, slow = _pair(spec, model)
    for pen in (Penalty(0.05, "abs"), Penalty(0.05, "rel")):
        want = _step_grads(slow, model, x, y, pen)
        got = _step_grads(fast, model, x, y, pen)
        assert _worst(got, want) == 0.0
    assert not fast_calls


def test_fa_with_forward_weights_equals_bp_in_one_backward(fast_calls):
    """FA's law on the fast path: with every feedback B = W, FA's update is BP's (both one-backward)."""
    model, x, y = _setup("resmlp", seed=3)
    fa = FA(model, 0)
    for k in fa.feedback:
        mod, name = k.split(".")
        owner = model.readout if mod == "readout" else model.blocks[int(mod[5:]) - 1]
        fa.feedback[k] = owner.feedback_weights()[name].detach().clone()
    g_fa = _step_grads(fa, model, x, y)
    g_bp = _step_grads(BP(model, 0), model, x, y)
    fa_random = _step_grads(FA(model, 0), model, x, y)
    diff = _worst(g_fa, g_bp)
    far = (fa_random["blocks.0.fc1.weight"] - g_bp["blocks.0.fc1.weight"]).abs().max().item()
    print(f"one-backward FA(B=W) vs BP max rel diff {diff:.2e}; random B differs from BP by {far:.2e}")
    assert len(fast_calls) == 3 and diff < 1e-12 and far > 1e-6


def test_a_subclass_that_changes_the_credits_takes_the_generic_path(fast_calls):
    """The fast path is FA's own credit chain: a relative overriding ``credits`` must not inherit it silently."""

    class Scaled(FA):
        def credits(self, model, tr, e):
            return [2.0 * c for c in super().credits(model, tr, e)][:-1] + [tr.states[-1] * 0 + 1.0]

    model, x, y = _setup("resmlp", seed=9)
    _step_grads(Scaled(model, 0), model, x, y)
    assert not fast_calls


@pytest.mark.parametrize("spec", ["fa", "kp", "fa-stream:identity"])
def test_stacked_one_backward_equals_the_stacked_generic_step_fp64(spec, fast_calls):
    """Stacked runs on the CPU (one scale per run and group) against the stacked generic path."""
    from test_batched import _build64, _cfgs, _data

    from depthaudit.batched import StackedStepper

    data = _data()
    cfgs = [parse_method_spec(spec, c)[1] for c in _cfgs("bp")]
    grads = []
    for fast in (False, True):
        built = [_build64(c, data) for c in cfgs]
        st = StackedStepper(cfgs, data, [b[0] for b in built], [b[1] for b in built])
        st.method.fast = fast
        idx = torch.arange(4 * 32).view(4, 32)
        st.model.zero_grad(set_to_none=True)
        st.method.step(st.model, data.x_train[idx], data.y_train[idx], replace(st.penalty))
        grads.append({n: p.grad.clone() for n, p in st.model.named_parameters() if p.grad is not None})
    worst = _worst(grads[1], grads[0])
    print(f"{spec}: stacked one-backward vs stacked generic, 4 runs, max rel diff {worst:.2e}")
    assert len(fast_calls) == 1 and set(grads[0]) == set(grads[1]) and worst < 1e-12
