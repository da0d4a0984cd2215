"""Feedback alignment (Lillicrap et al.): every weight transpose replaced by a fixed random matrix."""

import torch

from ..errors import UsageError
from ..models.adapter import _Delta
from ..models.base import ResidualModel
from ..models.functional import feedback_like
from ..recipe import Trace
from . import onebackward
from .base import METHODS, CreditMethod
from .options import Option


@METHODS.register("fa")
class FA(CreditMethod):
    """``e`` travels back through the readout and every block's Jacobian with ``Wᵀ → B``.

    Feedback ``B`` has the shape of the forward weight ``W`` it replaces and its init distribution
    (U(±1/√fan_in)); keys are ``readout.<name>`` and ``block<l>.<name>``. Each block's own update
    still uses exact local backprop (the recipe); only the credit passed between blocks uses ``B``.
    """

    name = "fa"
    random_feedback = True
    stackable = True
    graphable = True
    state_tensors = {"feedback": ""}  # block<l>.<name>, readout.<name>
    options = {"head": Option("feedback", "readout credit: feedback = Lillicrap's rule | exact = true gradient",
                              choices=("feedback", "exact"), flag="fa-head", legacy="fa_head")}
    needs_cache = True
    fast = True  # step takes the one-backward path (methods/onebackward.py) wherever it applies

    def __init__(self, model: ResidualModel, seed: int, head: str = "feedback"):
        super().__init__(model, seed)
        for where, mod in [*((f"block {i}", b) for i, b in enumerate(model.blocks, 1)), ("readout", model.readout)]:
            missing = [m for m in ("feedback_weights", "fa_vjp") + (("forward_cached",) if where != "readout" else ())
                       if not hasattr(mod, m)]
            if missing:
                own = mod.block if isinstance(mod, _Delta) else mod  # (an adapter wraps a user block: theirs is
                raise UsageError(f"method {self.name or 'fa'} needs {', '.join(missing)} on {where} "  # named, walk
                                 f"({type(own).__name__}); use a method that reads states only (bp, dfa) or "
                                 "implement them (see depthaudit/models/base.py)")
        gen = torch.Generator().manual_seed(seed)
        self.feedback: dict[str, torch.Tensor] = {}
        for i, blk in enumerate(model.blocks, start=1):
            for k, w in blk.feedback_weights().items():
                self.feedback[f"block{i}.{k}"] = feedback_like(w, gen)
        for k, w in model.readout.feedback_weights().items():
            self.feedback[f"readout.{k}"] = feedback_like(w, gen)
        self.set_head(head)

    head: str = "feedback"  # "exact": the true gradient through the readout (--fa-head exact)

    def set_head(self, head: str) -> None:
        """``feedback`` (default) or ``exact``: the latter passes the true loss gradient through the readout."""
        self.head = head
        self.needs_input_grad = head == "exact"  # the exact c_L comes from the readout's own backward

    def feedback_for(self, prefix: str, module) -> dict[str, torch.Tensor]:
        """The feedback matrices of one module, keyed as its ``feedback_weights()``."""
        return {k: self.matrix(f"{prefix}.{k}", w) for k, w in module.feedback_weights().items()}

    def matrix(self, key: str, weight: torch.Tensor) -> torch.Tensor:
        """The feedback used in place of ``weightᵀ`` (FA: the fixed random draw; relatives override)."""
        return self.feedback[key]

    def credits(self, model: ResidualModel, tr: Trace, e: torch.Tensor) -> list[torch.Tensor]:
        """``c_L`` = readout feedback VJP of ``e`` (or the exact ``∂ℓ/∂h_L``); ``c_{l-1} = c_l + J̃_lᵀ c_l``."""
        if self.head == "exact":
            c = tr.gL.detach()
        else:
            c = model.readout.fa_vjp(tr.hL.detach(), e, self.feedback_for("readout", model.readout))
        out = [c]
        for i in range(len(model.blocks), 0, -1):
            blk = model.blocks[i - 1]
            c = c + blk.fa_vjp(tr.caches[i - 1], c, self.feedback_for(f"block{i}", blk))
            out.append(c)
        return out[::-1]

    def step(self, model, x, y, scale_penalty=0.0):
        """One backward with every ``Wᵀ`` on the input path replaced by its feedback (methods/onebackward.py).

        Each block runs ``forward_cached`` on a detached copy of its input, so autograd takes the block's exact
        local backward into its parameters only; the input path is ``g + fa_vjp(cache, g, B)`` (and the
        readout's ``fa_vjp`` of the mean loss's logit gradient ``e / B`` with the feedback head). That leaves
        ``c_l / B`` on every stream state, and the block's cotangent is rescaled to the recipe's on its way in:
        equal to the generic path's update (tests/test_onebackward.py), onto gradients already present too. A
        subclass that changes :meth:`credits` or learns takes the generic path, as do the cases
        :func:`~depthaudit.methods.onebackward.fast_groups` names.
        """
        groups = onebackward.fast_groups(self, model, x, scale_penalty, accumulates=True)
        if groups is None or type(self).credits is not FA.credits or type(self).learn is not CreditMethod.learn:
            return super().step(model, x, y, scale_penalty)
        # drawn in the generic path's order (readout, then block L..1): brsf's magnitudes come from one stream
        runs = getattr(model, "runs", 0)
        fbs = {"readout": self.feedback_for("readout", model.readout)} if self.head == "feedback" else {}
        for i in range(len(model.blocks), 0, -1):
            fbs[i] = self.feedback_for(f"block{i}", model.blocks[i - 1])

        def block(i, blk, h):
            f, cache = blk.forward_cached(h.detach())
            return onebackward.link(h, f, lambda g: blk.fa_vjp(cache, g, fbs[i]), runs=runs)

        def readout(h):
            hd = h.detach()
            return onebackward.head(h, model.readout(hd), lambda g: model.readout.fa_vjp(hd, g, fbs["readout"]))

        return onebackward.step(model, x, y, groups, block, readout if self.head == "feedback" else None)
