"""Audit any residual model at any step: the method's credit against an exact reference, nothing of the run touched.

The credit ``c_l`` at every stream position ``h_l`` (l = 0..L) comes from one of three sources:

* ``"capture"`` (default): **the model's own backward pass**. The evaluator re-runs the forward through the
  model's named parts (``h_0 = embed(x)``, ``h_l = h_{l-1} + f_l(h_{l-1})``, ``logits = readout(h_L)``) and
  asks autograd for the gradient of the mean loss at every ``h_l`` — so a method implemented as custom
  ``torch.autograd.Function`` layers (biotorch-style layers whose backward uses ``B`` instead of ``Wᵀ``) is
  audited exactly as it trains. ``torch.autograd.grad`` with the states as inputs accumulates into no ``.grad``.
* a callable ``credit(states, logits, y) -> [c_0, …, c_L]``, each shaped like ``states[l]``;
* a depthaudit :class:`~depthaudit.methods.CreditMethod` (then the measurement is the CLI tracker's, to the bit).

Conventions are depthaudit's (SPEC §3): a credit or reference is **per example**, ``c_l = ∂(Σ_b ℓ_b)/∂h_l``
(what ``loss.sum()`` backprop gives; the captured mean-loss gradient is multiplied by the batch size ``B_p``);
Γ_l and D2's ``‖g_L‖`` are then reported in the field's mean-loss convention by the diagnostics the CLI uses
(:class:`~depthaudit.diagnostics.CreditCosine`, :class:`~depthaudit.diagnostics.RobustCosine`,
:class:`~depthaudit.diagnostics.StreamNorms`, :class:`~depthaudit.diagnostics.ReferenceNorm`).

The exact reference ``g_l`` (``reference=``):

* ``"auto"`` (default): the model's own autograd when its graph runs no custom autograd Function; else a
  **BP twin** — the same modules and weights, with every subclass of a standard torch layer (``nn.Linear``,
  ``nn.Conv2d``, …) whose ``forward`` was overridden temporarily run through its base class's ``forward``
  (biotorch's FA/uSF/… layers subclass ``nn.Linear``/``nn.Conv2d``). A custom Function left in the twin's graph
  is refused with the fix named;
* ``"autograd"``: trust the model's own backward as exact; ``"twin"``: always the BP twin;
* a callable ``reference(states, logits, y) -> [g_0, …, g_L]`` (per-example convention).

Nothing of the user's run changes: parameters, buffers, ``.grad``, the optimizer (never seen) and the torch RNG
streams (CPU and CUDA) are the same bit for bit afterwards; the model is measured in eval mode by default
(``eval_mode=False`` keeps the train-mode forward, with the RNG restored afterwards).
"""

import contextlib
import math
import types
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..diagnostics.base import EPS, Snapshot, registered, robust_cosine
from ..errors import UsageError
from ..methods.base import CreditMethod
from ..models.base import ResidualModel
from .checks import check_fit, place_batches

# standard layers whose subclasses (biotorch's FA/sign-symmetry layers, …) get their base forward in the BP twin
STANDARD_LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Bilinear, nn.Embedding, nn.LayerNorm,
                   nn.GroupNorm, nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)
TWIN_TOLERANCE = 1e-4  # the BP twin's logits must equal the model's to this relative max difference


def _check_model(model) -> ResidualModel:
    if not isinstance(model, ResidualModel):
        raise UsageError(f"the evaluator needs a residual model with named parts, got {type(model).__name__}; wrap "
                         "yours: depthaudit.models.ResidualAdapter(net, embed='…', blocks='…', readout='…')")
    return model


def _check_batches(batches) -> list:
    batches = list(batches)
    if not batches:
        raise UsageError("no probe batches given; pass a list of (x, y) held-out batches, e.g. 10 of 128")
    for i, b in enumerate(batches):
        if not (isinstance(b, Sequence) and len(b) == 2 and all(isinstance(t, torch.Tensor) for t in b)):
            raise UsageError(f"probe batch {i} is not an (x, y) pair of tensors; pass [(x, y), …]")
        if b[0].is_floating_point() and not bool(torch.isfinite(b[0]).all()):  # (one sync per batch, once)
            raise UsageError(f"probe batch {i}'s inputs hold NaN or inf values; give finite held-out inputs (the "
                             "adapter check and every measurement would blame the network for them)")
    sizes = sorted({b[0].shape[0] for b in batches})
    if sizes[0] < 1:  # (an empty batch measures nothing: torch's min() on it was the only message)
        raise UsageError("a probe batch holds no examples; give batches of B_p >= 1 held-out examples (e.g. 128)")
    if len(sizes) > 1:
        raise UsageError(f"probe batches of unequal sizes {sizes}: the mean-loss convention needs one batch size "
                         "B_p; drop the last, smaller batch (or cut the held-out set into equal batches)")
    return batches


def custom_backward_nodes(root: torch.Tensor) -> list[str]:
    """Names of the custom ``torch.autograd.Function`` nodes in ``root``'s backward graph (sorted, unique)."""
    seen, names, todo = set(), set(), [root.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if isinstance(node, torch.autograd.function.BackwardCFunction):
            names.add(type(node).__name__)
        todo.extend(n for n, _ in node.next_functions)
    return sorted(names)


def _twin_base(mod: nn.Module):
    for base in STANDARD_LAYERS:
        if isinstance(mod, base) and type(mod) is not base and type(mod).forward is not base.forward:
            return base
    return None


@contextlib.contextmanager
def bp_twin(model: nn.Module):
    """Within the block, ``model`` is its own BP twin: standard-layer subclasses run their base class's forward.

    Same modules, same parameter tensors (nothing is copied); the instance attributes set here are removed on
    exit. Yields the list of ``(module name, base class name)`` that were switched.
    """
    switched, saved = [], []
    try:
        for name, mod in model.named_modules():
            base = _twin_base(mod)
            if base is None:
                continue
            saved.append((mod, mod.__dict__.get("forward")))
            mod.forward = types.MethodType(base.forward, mod)
            switched.append((name, base.__name__))
        yield switched
    finally:
        for mod, old in saved:
            del mod.forward
            if old is not None:
                mod.forward = old


def forward_states(model: ResidualModel, x: torch.Tensor):
    """``(logits, [h_0, …, h_L])`` through the model's named parts, every ``h_l`` a node of the graph."""
    h = model.embed(x)
    if not h.requires_grad:  # a frozen embedding: the stream still needs a graph for the credits
        h = h.detach().requires_grad_()
    states = model.stream(h)
    return model.readout(states[-1]), states


def _loss(loss_fn, logits, y):
    loss = (loss_fn or F.cross_entropy)(logits, y)
    if not isinstance(loss, torch.Tensor):  # (walk 45 case 97: a float was an AttributeError from here)
        raise UsageError(f"loss_fn returned a {type(loss).__name__}; it must return the batch's mean loss as a scalar "
                         "tensor computed from the logits (e.g. F.cross_entropy(logits, y)), so the backward runs "
                         "through it")
    if loss.dim() != 0:
        raise UsageError(f"loss_fn returned shape {tuple(loss.shape)}; it must return the batch's mean loss (a scalar)")
    return loss


def capture_credits(model: ResidualModel, x: torch.Tensor, y: torch.Tensor, loss_fn=None):
    """The credit the model's own backward assigns to every stream state: ``(states, logits, credits, nodes)``.

    ``credits[l] = B · ∂ℓ_mean/∂h_l`` as the model's autograd computes it (per-example convention), through
    whatever custom backward its layers define; ``nodes`` names the custom autograd Functions it ran. No
    ``.grad`` is touched. States, logits and credits are detached.
    """
    if hasattr(x, "shape") and hasattr(y, "shape") and y is not None and len(y.shape) and x.shape[0] != y.shape[0]:
        raise UsageError(f"capture_credits: x holds {x.shape[0]} examples but y {y.shape[0]} labels; give one label "
                         "per example")
    return _capture(_check_model(model), x, y, loss_fn)[:4]


def _capture(model, x, y, loss_fn, block_params=None):
    """:func:`capture_credits` and, with ``block_params``, each block's parameter gradient under that backward.

    ``block_params`` is one list per block; its gradient of the mean loss comes back flattened into one fp64
    vector per block (None for a frozen block).
    """
    flat = [p for ps in block_params or [] for p in ps]
    with torch.enable_grad():
        logits, states = forward_states(model, x)
        loss = _loss(loss_fn, logits, y)
        nodes = custom_backward_nodes(loss)
        grads = torch.autograd.grad(loss, [*states, *flat], allow_unused=True)
    n = x.shape[0]
    credits = [torch.zeros_like(h) if g is None else g.detach() * n
               for h, g in zip(states, grads[:len(states)], strict=True)]
    pgrads, k = None, len(states)
    if block_params is not None:
        pgrads = []
        for ps in block_params:
            gs = [torch.zeros_like(p) if g is None else g for p, g in zip(ps, grads[k:k + len(ps)], strict=True)]
            pgrads.append(torch.cat([g.detach().double().flatten() for g in gs]) if gs else None)
            k += len(ps)
    return [h.detach() for h in states], logits.detach(), credits, nodes, pgrads


def _call_user(fn, what: str, states, logits, y) -> list[torch.Tensor]:
    out = fn([h.detach() for h in states], logits.detach(), y)
    if not isinstance(out, list | tuple):  # (walk 41 case 42: None was a bare TypeError from list())
        raise UsageError(f"{what} returned a {type(out).__name__}; it must return a list of tensors, one per stream "
                         f"position l = 0..L ({len(states)} here), each shaped like h_l")
    out = list(out)
    if len(out) != len(states):
        raise UsageError(f"{what} returned {len(out)} tensors; it must return one per stream position l = 0..L "
                         f"({len(states)} here)")
    for i, (c, h) in enumerate(zip(out, states, strict=True)):
        if not isinstance(c, torch.Tensor) or c.shape != h.shape:
            got = tuple(c.shape) if isinstance(c, torch.Tensor) else type(c).__name__
            raise UsageError(f"{what} returned {got} at l={i}; it must be shaped like h_{i}, {tuple(h.shape)}")
    return [c.detach() for c in out]


class _MeasuredSnapshot(Snapshot):
    """A :class:`Snapshot` whose states, credits and reference were measured by the evaluator (no traces)."""

    def __init__(self, model, batches, eps, states, credits, reference):
        super().__init__(model, None, batches, eps)
        cat = lambda per: [torch.cat(t).float() for t in zip(*per, strict=True)]  # noqa: E731
        self.__dict__.update(states=cat(states), credits=cat(credits), _reference=(cat(reference), None))


def _rng_state():
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    return torch.get_rng_state(), cuda


def _set_rng_state(state) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state_all(state[1])


@contextlib.contextmanager
def untouched(model: nn.Module, eval_mode: bool = True):
    """Leave the run as it was: RNG streams, train/eval flags, buffers and ``.grad`` restored; parameters checked.

    A parameter changed in place inside the block is an error (the evaluator never writes one; a model whose
    forward does cannot be measured without changing the run).
    """
    rng = _rng_state()
    flags = [(m, m.training) for m in model.modules()]
    params = list(model.parameters())
    versions = [p._version for p in params]
    grads = [(p.grad, None if p.grad is None else p.grad._version) for p in params]
    buffers = [(b, b._version, b.detach().clone()) for b in model.buffers()]
    trainable = [id(p) for p in params if p.requires_grad]
    if eval_mode:
        model.eval()
    try:
        yield
    finally:
        _set_rng_state(rng)
        for m, t in flags:
            m.training = t
        with torch.no_grad():
            for b, v, saved in buffers:  # (a train-mode BatchNorm updates its statistics without a version bump)
                if b._version != v or not torch.equal(b, saved):
                    b.copy_(saved)
        for p, (g, _) in zip(params, grads, strict=True):
            if p.grad is not g:
                p.grad = g
    if [id(p) for p in model.parameters() if p.requires_grad] != trainable:
        raise RuntimeError("the model's forward replaced trainable parameters during the evaluation (e.g. biotorch's "
                           "constrain_weights option); the optimizer now holds stale tensors: the evaluator cannot "
                           "measure such a model without changing the run")
    changed = [i for i, (p, v) in enumerate(zip(params, versions, strict=True)) if p._version != v]
    changed += [i for i, (p, (g, v)) in enumerate(zip(params, grads, strict=True)) if g is not None and g._version != v]
    if changed:
        names = [n for i, (n, _) in enumerate(model.named_parameters()) if i in set(changed)]
        raise RuntimeError(f"the model's forward/backward changed {', '.join(names[:4])} in place during the "
                           "evaluation; the evaluator cannot measure such a model without changing the run")


class CreditEvaluator:
    """Per-layer Γ, robust cosine, stream norms (D1) and ``‖g_L‖`` (D2) of a residual model, at any step.

    Args:
        model: a :class:`~depthaudit.models.ResidualModel` (e.g. a ``ResidualAdapter`` over the user's network).
        batches: held-out ``(x, y)`` probe batches, all of one size ``B_p`` (the reference: 10 of 128).
        credit: ``"capture"`` (the model's own backward), a callable ``credit(states, logits, y)``, or a
            depthaudit ``CreditMethod``.
        reference: ``"auto"``, ``"autograd"``, ``"twin"``, or a callable ``reference(states, logits, y)``.
        loss_fn: ``loss_fn(logits, y)`` -> the batch's mean loss (default cross-entropy).
        eps: the standard cosine's floor (1e-8).
        d1_stat: ``"median"`` (the reference) or ``"mean"`` per-example stream norm.
        eval_mode: measure in eval mode (restored afterwards).
        device: where the probe batches go (default: the device of the model's parameters).

    When built, the evaluator refuses in one line probe batches the model cannot take (dtype, feature shape,
    labels outside the classes) and, for a ``ResidualAdapter``, a description that is not the network
    (:meth:`~depthaudit.models.ResidualAdapter.verify`: logits equal to the network's own forward on the first probe
    batch within a relative 1e-4, and every block of the form ``h + f(h)``); ``verified`` holds that check's
    ``logits_max_diff``.

    Calling the evaluator returns the CLI tracker's measurement dict (``credit_cosine``, ``robust_cosine``,
    ``stream``, ``reference``; ``update_cosine`` for a ``CreditMethod``) plus ``evaluator``: where the credit and
    the reference came from, the custom backward nodes seen and the BP twin's logits max difference. The tensors
    of the last measurement (``states``, ``credits``, ``reference`` over all probe examples, per-example
    convention, fp32) stay on ``last_snapshot``.

    A ``CreditMethod`` is measured by the CLI's own :class:`~depthaudit.diagnostics.Snapshot`, inside the BP twin (a
    no-op for a plain model, so the numbers are the CLI's to the bit; on biotorch-converted layers it keeps the
    reference exact).
    """

    def __init__(self, model: ResidualModel, batches, credit="capture", reference="auto", loss_fn=None,
                 eps: float = EPS, d1_stat: str = "median", eval_mode: bool = True, device=None):
        self.model = _check_model(model)
        self.batches = place_batches(_check_batches(batches), self.model, device)
        if not (credit == "capture" or callable(credit) or isinstance(credit, CreditMethod)):
            raise UsageError(f"credit={credit!r}: use 'capture', a callable credit(states, logits, y) -> [c_0..c_L], "
                             "or a depthaudit CreditMethod")
        if not (reference in ("auto", "autograd", "twin") or callable(reference)):
            raise UsageError(f"reference={reference!r}: use 'auto', 'autograd', 'twin' or a callable "
                             "reference(states, logits, y) -> [g_0..g_L]")
        if isinstance(credit, CreditMethod) and reference not in ("auto", "autograd"):
            raise UsageError("a depthaudit CreditMethod is measured against the model's own autograd (the CLI's "
                             "reference); leave reference at 'auto'")
        if d1_stat not in ("median", "mean"):
            raise UsageError(f"d1_stat={d1_stat!r}: use median (the reference) or mean")
        if isinstance(eps, bool) or not isinstance(eps, int | float) or not (eps > 0 and math.isfinite(eps)):
            raise UsageError(f"eps={eps!r}: the cosine floor must be a finite number > 0 (the reference: 1e-8)")
        self.credit, self.reference, self.loss_fn = credit, reference, loss_fn
        self.eps, self.d1_stat, self.eval_mode = eps, d1_stat, eval_mode
        with untouched(self.model):  # the batches fit, and the model described is the network trained
            check_fit(self.model, self.batches, loss_fn, forward_states)
            verify = getattr(self.model, "verify", None)  # (a ResidualAdapter: its own forward to match)
            self.verified = verify(self.batches[0][0]) if callable(verify) else None
        # every registered diagnostic, as the CLI's tracker plans it for every measurement (no functional ones)
        plan = {"every": 1, "d1_stat": d1_stat, "functional": None}
        self.diagnostics = [d for cls in registered() if (d := cls.from_plan(plan)) is not None]

    def __call__(self) -> dict:
        """Measure now; the run (parameters, buffers, grads, RNG, modes) is left exactly as it was."""
        with untouched(self.model, self.eval_mode):
            if isinstance(self.credit, CreditMethod):
                return self._measure_method()
            return self._measure()

    def _measure_method(self) -> dict:
        """A depthaudit method: the CLI tracker's own Snapshot, inside the BP twin (a no-op for a plain model)."""
        with bp_twin(self.model) as switched:
            nodes = []
            if self.reference == "auto":  # the Snapshot's reference is the model's autograd: it must be exact
                x, y = self.batches[0]
                with torch.enable_grad():
                    nodes = custom_backward_nodes(_loss(self.loss_fn, forward_states(self.model, x)[0], y))
                if nodes:
                    raise UsageError(f"the model's backward runs custom autograd Functions ({', '.join(nodes)}) "
                                     "even in its BP twin, and a depthaudit method is measured against the model's "
                                     "autograd; pass reference='autograd' if that backward is exact, or use "
                                     "credit='capture' / a callable with reference= a callable")
            snap = Snapshot(self.model, self.credit, self.batches, self.eps)
            out = {d.name: d.compute(snap) for d in self.diagnostics}
        out["evaluator"] = {"credit": f"method:{self.credit.name or type(self.credit).__name__}",
                            "reference": "twin" if switched else "autograd", "custom_backward": nodes,
                            "twin_logits_max_diff": None}
        self.last_snapshot = snap
        return out

    def _reference_for(self, x, y, states, logits, nodes, block_params):
        """``(kind, reference credits, twin max diff, exact block parameter gradients)`` for one batch."""
        if callable(self.reference):
            return "callable", _call_user(self.reference, "reference", states, logits, y), None, None
        kind = self.reference
        if kind == "auto":
            kind = "twin" if nodes else "autograd"
        if kind == "autograd":
            return kind, None, None, None
        with bp_twin(self.model) as switched:
            _, twin_logits, ref, left, pgrads = _capture(self.model, x, y, self.loss_fn, block_params)
        if left:
            note = f" (it switched {len(switched)} layers)" if switched else ""
            raise UsageError(f"the model's backward runs custom autograd Functions ({', '.join(left)}) that the BP "
                             f"twin cannot replace{note}; pass reference= a callable reference(states, logits, y) "
                             "-> exact [g_0..g_L], or "
                             "reference='autograd' if that backward is exact")
        scale = logits.abs().max().clamp_min(1.0)
        diff = ((twin_logits - logits).abs().max() / scale).item()
        if not diff <= TWIN_TOLERANCE and math.isfinite(logits.abs().max().item()):
            raise UsageError(f"the BP twin computes another function than the model (relative max |Δlogits| = "
                             f"{diff:.2e} > {TWIN_TOLERANCE:g}): its layers' forward differs from their torch base "
                             "class; pass reference= a callable giving the exact gradient")
        return "twin", ref, diff, pgrads

    def _measure(self) -> dict:
        states, credits, refs, kinds, nodes_seen, diffs = [], [], [], set(), set(), []
        block_params = [[p for p in blk.parameters() if p.requires_grad] for blk in self.model.blocks]
        mine_p, ref_p = None, None  # per block, the parameter gradient summed over the probe batches
        add = lambda tot, g: g if tot is None else [None if a is None else a + b  # noqa: E731
                                                     for a, b in zip(tot, g, strict=True)]
        for x, y in self.batches:
            rng = _rng_state()  # every pass over this batch sees the same random draws (train-mode dropout)
            pg = None
            if self.credit == "capture":
                st, logits, cs, nodes, pg = _capture(self.model, x, y, self.loss_fn, block_params)
                mine_p = add(mine_p, pg)
            else:
                with torch.enable_grad():
                    logits, st = forward_states(self.model, x)
                    nodes = custom_backward_nodes(_loss(self.loss_fn, logits, y))
                st, logits = [h.detach() for h in st], logits.detach()
                cs = _call_user(self.credit, "credit", st, logits, y)
            _set_rng_state(rng)
            kind, ref, diff, rpg = self._reference_for(x, y, st, logits, nodes, block_params)
            if kind == "autograd":
                ref, rpg = (cs, pg) if self.credit == "capture" else (_capture(self.model, x, y, self.loss_fn)[2], None)
            if rpg is not None:
                ref_p = add(ref_p, rpg)
            kinds.add(kind)
            nodes_seen.update(nodes)
            if diff is not None:
                diffs.append(diff)
            states.append(st)
            credits.append(cs)
            refs.append(ref)
        snap = _MeasuredSnapshot(self.model, self.batches, self.eps, states, credits, refs)
        # the method's own backward is not there to read: those diagnostics are left out (update_cosine: below)
        out = {d.name: d.compute(snap) for d in self.diagnostics if not d.needs_method}
        if mine_p is not None and ref_p is not None:
            out["update_cosine"] = {"per_block": [None if m is None else robust_cosine(m, r)
                                                  for m, r in zip(mine_p, ref_p, strict=True)],
                                    "kind": "the block's parameter gradient under the model's own backward vs "
                                            "under the exact one (robust cosine)"}
        out["evaluator"] = {"credit": "capture" if self.credit == "capture" else "callable",
                            "reference": "/".join(sorted(kinds)), "custom_backward": sorted(nodes_seen),
                            "twin_logits_max_diff": max(diffs) if diffs else None}
        self.last_snapshot = snap
        return out
