"""Names renamed so that "probe" means one thing (docs/protocol.md#glossary): the old public names still work for
one release, with a DeprecationWarning, and a plug-in that overrides the old ``CreditMethod.probe`` is honoured."""

import pytest
import torch

from depthaudit.diagnostics import Snapshot
from depthaudit.evaluator import CreditEvaluator
from depthaudit.methods import build_method
from depthaudit.methods.base import CreditMethod
from depthaudit.methods.bp import BP
from depthaudit.models import build_model


def _setup():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(8, 12, generator=g), torch.randint(0, 10, (8,), generator=g)
    return build_model("resmlp", (12,), 10, 8, 2, None, 0), x, y


def test_probe_is_the_deprecated_name_of_snapshot():
    import depthaudit.diagnostics as diagnostics
    import depthaudit.diagnostics.base as base

    for mod in (diagnostics, base):
        with pytest.warns(DeprecationWarning, match="now Snapshot"):
            assert mod.Probe is Snapshot
    with pytest.raises(AttributeError):
        diagnostics.NoSuchName  # noqa: B018


def test_measure_credits_and_its_deprecated_name():
    model, x, y = _setup()
    fa = build_method("fa", model, 3)
    states, credits = fa.measure_credits(model, x, y)
    with pytest.warns(DeprecationWarning, match="now measure_credits"):
        old = fa.probe(model, x, y)
    assert all(torch.equal(a, b) for a, b in zip(old[1], credits, strict=True)) and len(states) == 3


def test_a_plugin_overriding_the_old_probe_is_still_used():
    model, x, y = _setup()
    with pytest.warns(DeprecationWarning, match="overrides CreditMethod.probe"):
        class Halved(BP):
            def probe(self, model, x, y):  # a plug-in written before the rename, calling the base's
                states, credits = super().probe(model, x, y)
                return states, [c / 2 for c in credits]
    _, bp = BP(model, 0).measure_credits(model, x, y)
    with pytest.warns(DeprecationWarning):  # its super().probe() is the old name
        _, half = Halved(model, 0).measure_credits(model, x, y)
    assert all(torch.equal(h, b / 2) for h, b in zip(half, bp, strict=True))
    assert issubclass(Halved, CreditMethod)


def test_last_probe_is_the_deprecated_name_of_last_snapshot():
    model, x, y = _setup()
    ev = CreditEvaluator(model, [(x, y)])
    ev()
    with pytest.warns(DeprecationWarning, match="now last_snapshot"):
        assert ev.last_probe is ev.last_snapshot
