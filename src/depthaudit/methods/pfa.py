"""Product feedback alignment (Li & Benna 2024, "Deep learning without weight symmetry").

Paper's rule: the error at layer l+1 reaches layer l through a product of two feedback matrices, via an extra
population of N neurons: ``δ_l = f′ ⊙ B R δ_{l+1}`` with ``R`` (N × n_{l+1}) fixed random and ``B`` (n_l × N)
plastic. ``B`` learns with a local, Kolen–Pollack-like rule (pre-synaptic ``r = R δ`` times post-synaptic
activity, plus the same weight decay as ``W``), so the *product* ``B R`` comes to align with ``Wᵀ`` while no
single feedback synapse mirrors a forward one (no explicit weight symmetry). This is our reading of the paper
(written offline, from its abstract and method summary, not its code): check its Methods before quoting a
difference between its figures and ours.

Our choices (in W's shape, as every FA relative here): the matrix used in place of ``Wᵀ`` is ``M = Q P`` with
``Q = Rᵀ`` (out × N, fixed, entries N(0, 1/N) so ``Q Qᵀ ≈ I``) and ``P = Bᵀ`` (N × in, learned, initialised
U(±1/√in) so ``M_0`` has FA's init variance); ``N = ratio · out`` (option ``ratio``, default 4). After each
optimizer step, for every *trained* weight: ``U = W_t − W_{t−1} + lr·wd·W_{t−1}`` (the step's update without its
decoupled decay) and ``P ← (1 − lr·wd) P + Qᵀ U``, hence ``M − W ← (1 − lr·wd)(M − W) + (QQᵀ − I) U``: KP's
exact decay of the mismatch up to the expansion's non-orthogonality. Under ``--optimizer sgd`` (coupled decay,
momentum) ``U`` is the same formula, an approximation of the step's gradient part.

Speed (ours; the same arithmetic up to float rounding): the update is linear, so the product is kept rather than
re-formed: ``M ← (1 − lr·wd) M + (QQᵀ) U`` with ``QQᵀ`` (out × out) formed once, and ``P`` is brought up to date
only when it is read (a checkpoint, a grown network): ``P = α P_s + Qᵀ S`` with ``α`` the product of the
decays and ``S ← (1 − lr·wd) S + U`` since the last sync. A step costs one (out × out)·(out × in) product per
weight instead of two (out × N)·(N × in) ones (N = 4·out): 8.5× less feedback work on the reference ResMLP.
"""

import torch

from ..models.base import ResidualModel
from .base import METHODS
from .fa import FA
from .options import Option


@METHODS.register("pfa")
class ProductFA(FA):
    """FA with feedback ``M = Q P``: Q fixed random expansion, P learned by a KP-like rule through Q."""

    name = "pfa"
    stackable = False
    graphable = False
    state_tensors = {"feedback": "", "expansion": ".R"}  # the learned P (keys as FA's), the fixed Q (<key>.R)
    options = {**FA.options, "ratio": Option(4, "expansion N / out of the intermediate population", lo=1)}

    def __init__(self, model: ResidualModel, seed: int, head: str = "feedback", ratio: int = 4):
        super().__init__(model, seed, head)
        self.ratio = int(ratio)
        self._weights = {f"block{i}.{k}": w for i, blk in enumerate(model.blocks, start=1)
                         for k, w in blk.feedback_weights().items()}
        self._weights.update({f"readout.{k}": w for k, w in model.readout.feedback_weights().items()})
        gen = torch.Generator().manual_seed(seed + 1)
        self.feedback, self.expansion = {}, {}
        for k, w in self._weights.items():  # keys in FA's order: block1.…, …, readout.…
            out, inp = w.shape[0], w[0].numel()
            n = self.ratio * out
            self.expansion[k] = (torch.randn(out, n, generator=gen, dtype=w.dtype) * n**-0.5).to(w.device)
            self.feedback[k] = torch.empty(n, inp, dtype=w.dtype).uniform_(-inp**-0.5, inp**-0.5,
                                                                           generator=gen).to(w.device)
        self._prev: dict[str, torch.Tensor] = {}
        self._fresh()

    def _fresh(self) -> None:
        """Drop the kept products: they are formed again from ``P`` (after a load, a move, a sync)."""
        self._m: dict[str, torch.Tensor] = {}  # key -> M = Q P, kept up to date step by step
        self._qq: dict[str, torch.Tensor] = {}  # key -> Q Qᵀ (out, out), fixed
        self._since: dict[str, tuple[float, torch.Tensor]] = {}  # key -> (α, S): P = α P + Qᵀ S is owed

    def _sync(self) -> None:
        """Bring every ``P`` up to date (what a checkpoint stores): ``P ← α P + Qᵀ S``."""
        for k, (alpha, acc) in self._since.items():
            self.feedback[k] = (alpha * self.feedback[k]).add_(self.expansion[k].mT @ acc)
        self._since = {}

    def matrix(self, key: str, weight: torch.Tensor) -> torch.Tensor:
        """``M = Q P`` in ``weight``'s shape (kept between steps, formed on first use)."""
        if key not in self._m:
            self._sync()
            self._m[key] = self.expansion[key] @ self.feedback[key]  # (out, in)
        return self._m[key].view_as(weight)

    @torch.no_grad()
    def learn(self, model, tr, e):
        """Remember the forward weights before the optimizer moves them (the update is read after the step)."""
        self._prev = {k: w.detach().flatten(1).clone() for k, w in self._weights.items() if w.requires_grad}

    @torch.no_grad()
    def after_step(self, model, lr=0.0, weight_decay=0.0):
        """``P ← (1 − lr·wd) P + Qᵀ U`` for every weight that trained this step (kept as ``M`` and ``(α, S)``)."""
        c = 1 - lr * weight_decay
        for k, prev in self._prev.items():
            u = self._weights[k].detach().flatten(1) - prev + lr * weight_decay * prev  # (out, in)
            q = self.expansion[k]
            if k not in self._m:
                self.matrix(k, self._weights[k])
            if k not in self._qq:
                self._qq[k] = q @ q.mT  # (out, out)
            self._m[k].mul_(c).add_(self._qq[k] @ u)
            alpha, acc = self._since.get(k, (1.0, torch.zeros_like(u)))
            self._since[k] = (alpha * c, acc.mul_(c).add_(u))
        self._prev = {}

    def state_dict(self) -> dict[str, torch.Tensor]:
        """``P`` brought up to date first (the stored state is ``P`` and ``Q``, as before the products were kept).

        ``M`` is then formed again from ``P`` here too, so a run restored from this state and the run that wrote it
        go on bit for bit alike (a kept ``M`` and a re-formed ``Q P`` differ by rounding).
        """
        self._sync()
        self._m = {}
        return super().state_dict()

    def load_state_dict(self, state: dict[str, torch.Tensor], check: bool = True) -> None:
        """Restore ``P`` and ``Q``; the kept products are formed again from them."""
        super().load_state_dict(state, check)
        self._fresh()

    def to(self, device) -> "ProductFA":
        """Move ``P`` and ``Q`` (brought up to date) to ``device``; the products follow on first use."""
        self._sync()
        super().to(device)
        self._fresh()
        return self
