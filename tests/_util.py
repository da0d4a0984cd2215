"""Helpers shared by test files (imported as ``from _util import …``; pytest puts tests/ on the path)."""

import json


def without_wallclock(runs: dict) -> dict:
    """Run records minus wall-clock fields and where they were trained: what two equal runs share exactly."""
    runs = json.loads(json.dumps(runs))
    for rec in runs.values():
        for k in ("started_at", "written_at", "argv", "executor"):
            rec["provenance"].pop(k, None)
        rec.pop("timing")
        for h in rec["history"]:
            h.pop("seconds")
    return runs


def exact_remaining(model):
    """A State Bridge predictor that is the true remaining network: ``G(h, pos, e) = h_L`` from ``h`` at ``pos``."""
    def remaining(h, pos, e):
        for blk in model.blocks[pos:]:
            h = h + blk(h)
        return h

    return remaining


def _tiny_classes():
    import torch
    from torch import nn

    class TinyBlk(nn.Module):
        """A user's residual block that adds its own skip: ``h + lin(h)``."""

        def __init__(self, d):
            super().__init__()
            self.lin = nn.Linear(d, d)

        def forward(self, h):
            return h + self.lin(h)

    class TinyNet(nn.Module):
        """A user's network (stem → blocks → head), not a depthaudit model: what a ResidualAdapter wraps."""

        def __init__(self, din, d, num_blocks, num_classes):
            super().__init__()
            self.stem, self.head = nn.Linear(din, d), nn.Linear(d, num_classes)
            self.layers = nn.ModuleList([TinyBlk(d) for _ in range(num_blocks)])

        def forward(self, x):
            h = self.stem(torch.flatten(x, 1))
            for b in self.layers:
                h = b(h)
            return self.head(h)

    return TinyBlk, TinyNet


TinyBlk, TinyNet = _tiny_classes()


def plugin_in(monkeypatch, tmp_path, name: str, code: str, *registries) -> None:
    """A plug-in module ``name`` written into ``tmp_path`` and importable, the working folder ``tmp_path``; the
    ``registries`` it registers into are restored after the test (its names stay this test's only)."""
    for reg in registries:
        monkeypatch.setattr(reg, "_items", dict(reg._items))
        monkeypatch.setattr(reg, "_meta", dict(reg._meta))
    (tmp_path / f"{name}.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
