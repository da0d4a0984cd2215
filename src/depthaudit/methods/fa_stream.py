"""Stream-level feedback alignment (SPEC §2): what the published implementation calls "vanilla FA".

Known from its authors' notes, not its code: ``c_L = ∂ℓ/∂h_L`` exactly (through the readout, as BP); down
the stream ``c_{l-1} = c_l B_lᵀ`` with one fixed random d×d ``B_l`` per block — or, with the residual identity
path kept (``--fa-stream-identity``), ``c_{l-1} = c_l + c_l B_lᵀ``. ``B_l`` ~ N(0, s²/d) with
``--fa-stream-scale s`` (default 1; it matters only when the identity is kept), drawn from the run's seed,
saved with the checkpoint. For token or spatial states it acts on the feature dimension (the last one, or
the model's ``feature_dim``). Its verdicts differ sharply from the per-weight rule's (``fa``): every result
names the variant (``method = fa-stream`` and the config's ``fa_stream_identity``/``fa_stream_scale``).
"""

import torch

from ..errors import UsageError
from ..models.base import ResidualModel
from ..recipe import Trace
from . import onebackward
from .base import METHODS, CreditMethod
from .options import Option


@METHODS.register("fa-stream")
class FAStream(CreditMethod):
    """One fixed random d×d matrix per block carries the exact top credit down the stream."""

    name = "fa-stream"
    needs_input_grad = True  # c_L is the exact readout gradient (Trace.gL)
    random_feedback = True
    stackable = True
    graphable = True
    state_tensors = {"feedback": ""}  # B1..BL
    fast = True  # step takes the one-backward path (methods/onebackward.py) wherever it applies
    options = {"identity": Option(False, "keep the residual identity path, c + c·Bᵀ", legacy="fa_stream_identity"),
               "scale": Option(1.0, "B_l ~ N(0, s²/d)", lo=0, legacy="fa_stream_scale")}

    def __init__(self, model: ResidualModel, seed: int, identity: bool = False, scale: float = 1.0):
        super().__init__(model, seed)
        self.identity, self.scale, self.dim = bool(identity), float(scale), getattr(model, "feature_dim", -1)
        self.feedback: dict[str, torch.Tensor] = {}
        self.num_blocks = len(model.blocks)

    def _draw(self, states: list[torch.Tensor]) -> None:
        widths = {h.shape[self.dim] for h in states}
        if len(widths) != 1:
            raise UsageError(f"method fa-stream needs one stream width, but the states' feature dimension takes "
                             f"{sorted(widths)}; use fa or dfa for this model")
        (d,) = widths
        gen = torch.Generator().manual_seed(self.seed)
        for i in range(1, self.num_blocks + 1):
            b = torch.randn(d, d, generator=gen) * (self.scale / d**0.5)
            self.feedback.setdefault(f"B{i}", b.to(device=states[0].device, dtype=states[0].dtype))  # growth: keep

    def credits(self, model: ResidualModel, tr: Trace, e: torch.Tensor) -> list[torch.Tensor]:
        """``c_L = ∂ℓ/∂h_L``; ``c_{l-1} = c_l B_lᵀ`` (+ ``c_l`` with the identity kept)."""
        if len(self.feedback) < self.num_blocks:  # first use, or a block was inserted (CreditMethod.grown)
            self._draw(tr.states)
        c = tr.gL.detach()
        out = [c]
        for i in range(self.num_blocks, 0, -1):
            cb = self._down(i, c)
            c = c + cb if self.identity else cb
            out.append(c)
        return out[::-1]

    def _down(self, i: int, c: torch.Tensor) -> torch.Tensor:
        """``c B_iᵀ`` on the feature dimension; ``c`` is a stream credit (B, …, d), stacked (R, B, …, d)."""
        return (c.movedim(self.dim, -1) @ self.feedback[f"B{i}"].mT).movedim(-1, self.dim)

    def step(self, model, x, y, scale_penalty=0.0):
        """One backward whose stream path is ``g B_lᵀ`` (+ ``g``), blocks' own backward exact (onebackward.py).

        The readout's backward is exact (``c_L = ∂ℓ/∂h_L``); each block runs on a detached copy of its input and
        ``h_{l-1}`` gets ``g B_lᵀ`` (+ ``g`` with the identity kept), so ``c_l / B`` lies on every state; equal to
        the generic path (tests/test_onebackward.py), which a subclass changing :meth:`credits` still takes.
        """
        groups = onebackward.fast_groups(self, model, x, scale_penalty, accumulates=True)
        runs = getattr(model, "runs", 0)
        if groups is None or type(self).credits is not FAStream.credits or type(self).learn is not CreditMethod.learn:
            return super().step(model, x, y, scale_penalty)

        def block(i, blk, h):
            if len(self.feedback) < self.num_blocks:  # first use, or a block was inserted
                self._draw([h])
            return onebackward.link(h, blk(h.detach()), lambda g: self._down(i, g), self.identity, runs)

        return onebackward.step(model, x, y, groups, block)
