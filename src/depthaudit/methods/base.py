"""The credit-method interface: turn the output error into a credit at every stream position."""

import copy
import re
from typing import ClassVar

import torch

from ..errors import UsageError
from ..models.base import ResidualModel
from ..recipe import Trace, local_update, output_error, readout_pass, trace_forward
from ..registry import Registry
from .options import Option, declared

METHODS: Registry = Registry("method")


_STATE_KEY = re.compile(r"^(block|B)(\d+)(\..*)?$|^readout\.")


def _shift(key: str, position: int) -> str:
    """``block<i>…``/``B<i>`` with ``i >= position`` → ``i + 1`` (a block was inserted at ``position``)."""
    m = _STATE_KEY.match(key)
    if m is None or m.group(1) is None or int(m.group(2)) < position:
        return key
    return f"{m.group(1)}{int(m.group(2)) + 1}{m.group(3) or ''}"


def _versions(model) -> list:
    """Each parameter's and its ``.grad``'s in-place version (and which ``.grad``): what credits() leaves alone."""
    return [(p._version, None if p.grad is None else (id(p.grad), p.grad._version)) for p in model.parameters()]


class CreditMethod:
    """Base class. Subclasses implement :meth:`credits`; the recipe around it is shared.

    A method is built once per run as ``cls(model, seed)``; any random feedback it draws comes from
    ``seed`` (already derived from the run's seed), is fixed for the run, and lives in
    :meth:`state_dict` so checkpoints carry it. Register a new one with ``@METHODS.register("name")``.
    """

    name: ClassVar[str] = ""
    needs_input_grad: ClassVar[bool] = False  # trace block inputs as grad-requiring leaves
    needs_cache: ClassVar[bool] = False  # keep per-block forward caches (feedback VJPs)
    exact_credits: ClassVar[bool] = False  # credits are exactly BP's (diagnostics reuse the reference)
    random_feedback: ClassVar[bool] = False  # fixed random feedback drawn from the seed (fresh-B null applies)
    # runs of this method can train stacked in one process (batched.py): credits broadcast over a leading
    # run dim and the method's whole state is its state_dict's tensors
    stackable: ClassVar[bool] = False
    # a stacked step can be recorded once as a CUDA graph and replayed (batched.py, --cuda-graphs): ``step``
    # makes no host sync, draws no random numbers and changes no Python-side state after its first call
    graphable: ClassVar[bool] = False
    # growth can insert a block mid-training (see :meth:`grown`); False for state built for a fixed depth
    growable: ClassVar[bool] = True
    # the method's own options (methods/options.py): ``name:key=value`` in ``--methods``, a generated flag
    # ``--{name}-{key}``, validated from the declaration, passed to ``__init__`` as keywords, stored in every
    # result's ``method_options``; each is kept on the instance as the attribute of the same name
    options: ClassVar[dict[str, Option]] = {}
    # the method's state, saved with checkpoints, stacked, moved and re-keyed on growth by this class's
    # state_dict/load_state_dict/to: each attribute named is a dict of tensors, stored under its keys plus the
    # suffix given; each counter attribute an int, stored as the one key given
    state_tensors: ClassVar[dict[str, str]] = {}
    state_counters: ClassVar[dict[str, str]] = {}

    def __init__(self, model: ResidualModel, seed: int):
        self.seed = seed

    def credits(self, model: ResidualModel, tr: Trace, e: torch.Tensor) -> list[torch.Tensor]:
        """Return ``[c_0, …, c_L]``, each shaped like ``tr.states[l]``; ``e`` is (B, C)."""
        import inspect

        cls = type(self)
        try:  # where the class is, so a plug-in's missing method is found (walk 18 case 142: a bare
            where = f" ({inspect.getsourcefile(cls)}:{inspect.getsourcelines(cls)[1]})"  # NotImplementedError)
        except (OSError, TypeError):
            where = ""
        raise NotImplementedError(f"{cls.__name__}{where} defines no credits(model, tr, e); implement it (see "
                                  "docs/adding-a-method.md)")

    def checked_credits(self, model: ResidualModel, tr: Trace, e: torch.Tensor) -> list[torch.Tensor]:
        """:meth:`credits`, refused unless it is one tensor per stream position, each shaped like that position.

        Every caller takes credits through here, so a method (a user's plug-in) that returns the wrong number
        or shape of credits is named where it happened, not by a zip deep inside a diagnostic.
        """
        users = not type(self).__module__.startswith("depthaudit.")  # a plug-in's method: what it may not touch is
        if users:  # checked too (walk 28: a grad mode switched off, weights changed in place, surfaced later as
            grad, versions = torch.is_grad_enabled(), _versions(model)  # torch's errors, or a result quietly changed)
        cs = self.credits(model, tr, e)
        if users and torch.is_grad_enabled() != grad:
            torch.set_grad_enabled(grad)
            raise ValueError(f"{type(self).__name__}.credits() switched autograd {'off' if grad else 'on'} "
                             "(torch.set_grad_enabled) and left it so; leave torch's grad mode as you found it "
                             "(use `with torch.no_grad():` inside)")
        if users and _versions(model) != versions:
            raise ValueError(f"{type(self).__name__}.credits() changed the model's parameters or their .grad in "
                             "place; credits() must only read the model (the recipe turns the credits into "
                             "gradients and the optimizer updates it)")
        n = len(tr.states)
        if not isinstance(cs, list | tuple) or len(cs) != n:
            got = f"{len(cs)} credits" if isinstance(cs, list | tuple) else f"a {type(cs).__name__}"
            raise ValueError(f"{type(self).__name__}.credits() returned {got} for the {n} stream positions "
                             f"h_0..h_{n - 1}; return a list of one credit per position")
        for i, (c, h) in enumerate(zip(cs, tr.states, strict=True)):
            if not isinstance(c, torch.Tensor) or c.shape != h.shape:
                what = tuple(c.shape) if isinstance(c, torch.Tensor) else type(c).__name__
                raise ValueError(f"{type(self).__name__}.credits()[{i}] is {what}, not shaped like h_{i} "
                                 f"{tuple(h.shape)}")
            if not c.is_floating_point():  # (walk 35 case 189: int64 credits were torch's "could not infer output
                raise ValueError(f"{type(self).__name__}.credits()[{i}] is {c.dtype}, not a floating-point "  # dtype")
                                 f"tensor; return credits of h_{i}'s dtype ({h.dtype})")
        return list(cs)

    def step(self, model: ResidualModel, x: torch.Tensor, y: torch.Tensor, scale_penalty=0.0) -> torch.Tensor:
        """Accumulate the recipe's gradients into ``.grad`` for one batch; return the mean loss.

        ``scale_penalty``: a :class:`depthaudit.recipe.Penalty` (or a float λ in the reference form).
        """
        tr = trace_forward(model, x, input_grad=self.needs_input_grad, cache=self.needs_cache)
        loss = readout_pass(tr, y)
        e = output_error(tr.logits, y)
        self.learn(model, tr, e)
        local_update(model, tr, self.checked_credits(model, tr, e), scale_penalty)
        return loss

    def learn(self, model: ResidualModel, tr: Trace, e: torch.Tensor) -> None:
        """Train the method's own auxiliary network on this batch before its credits are taken (default: none)."""

    def measure_credits(self, model: ResidualModel, x: torch.Tensor, y: torch.Tensor):
        """``(states, credits)`` on a batch without touching any ``.grad`` (for diagnostics; draws lazy feedback)."""
        tr = trace_forward(model, x, input_grad=self.needs_input_grad, cache=self.needs_cache)
        readout_pass(tr, y, accumulate=False)
        cs = self.checked_credits(model, tr, output_error(tr.logits, y))
        return tr.states, [c.detach() for c in cs]

    def epoch_stats(self) -> dict:
        """Per-epoch figures of the method's own learning (e.g. an auxiliary network's loss); ``{}`` for none."""
        return {}

    def redrawn(self, model: ResidualModel, seed: int) -> "CreditMethod":
        """The same method and options with feedback drawn from ``seed`` (the fresh-B null)."""
        return type(self)(model, seed, **self.option_values())

    def option_values(self) -> dict:
        """This instance's options, by name (each is the attribute of that name)."""
        return {k: getattr(self, k) for k in declared(type(self))}

    def grown(self, model: ResidualModel, position: int, seed: int) -> "CreditMethod":
        """This method for ``model`` after a block was inserted as block ``position`` (1-based; growth).

        Existing feedback is kept, re-keyed: an entry indexed by a block or stream position ``i >= position``
        (``block<i>.<name>``, ``B<i>``) moves to ``i + 1``; the new block's entries are drawn from ``seed`` (a
        method that draws on first use draws them then). A method without state returns itself. Methods whose
        state is not indexed that way (an auxiliary network conditioned on L) refuse.
        """
        old = self.state_dict()
        if self.growable and not old and not self.random_feedback:
            return self
        if not self.growable or any(_STATE_KEY.match(k) is None for k in old):
            raise UsageError(f"method {self.name or type(self).__name__} cannot grow a network (its state is not "
                             "per block); use bp, fa, dfa, kp, usf, frsf, fa-stream or ep")
        fresh = self.redrawn(model, seed if old else self.seed)
        state = fresh.state_dict()
        state.update({_shift(k, position): v for k, v in old.items()})
        fresh.load_state_dict(state)
        return fresh.to(next(model.parameters()).device)

    def after_step(self, model: ResidualModel, lr: float = 0.0, weight_decay: float = 0.0) -> None:
        """Called after the optimizers step with that step's lr and weight decay (learning feedback)."""

    @classmethod
    def stack(cls, methods: list["CreditMethod"], model: ResidualModel, trains: dict[str, torch.Tensor]):
        """One method for R stacked runs: ``methods[0]``'s options, every state tensor stacked (R, …).

        ``model`` is the stacked model; ``trains[group]`` is the (R,) mask of runs whose group trains.
        """
        stacked = copy.deepcopy(methods[0])
        states = [m.state_dict() for m in methods]
        stacked.load_state_dict({k: torch.stack([s[k] for s in states]) for k in states[0]}, check=False)
        return stacked.to(next(model.parameters()).device)

    def unstack(self, methods: list["CreditMethod"], runs: list[int] | None = None) -> None:
        """Write run r's slice of this stacked method's state back into ``methods[r]`` (all runs or ``runs``)."""
        state = self.state_dict()
        for r in range(len(methods)) if runs is None else runs:
            methods[r].load_state_dict({k: v[r] for k, v in state.items()})

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The declared state (:attr:`state_tensors`, :attr:`state_counters`) as CPU copies, for checkpoints."""
        out = {k + sfx: v.detach().cpu().clone() for attr, sfx in self.state_tensors.items()
               for k, v in getattr(self, attr).items()}
        return {**out, **{key: torch.tensor(getattr(self, attr)) for attr, key in self.state_counters.items()}}

    def load_state_dict(self, state: dict[str, torch.Tensor], check: bool = True) -> None:
        """Restore what :meth:`state_dict` returned, onto the device each tensor is on (the stream's), else as stored.

        A tensor the method already holds must come back in its shape and none may be missing (one
        :class:`~depthaudit.errors.UsageError` naming the first misfit); ``check=False`` lets :meth:`stack` put
        stacked (R, …) tensors in. Stacked runs write each run's slice back through here before its tracker
        measures it: on a GPU the slice must land where the run's stream is, not on a CPU copy.
        """
        keyed = sorted(self.state_tensors.items(), key=lambda a: -len(a[1]))  # longest suffix claims first
        counters = set(self.state_counters.values())
        parts: dict[str, dict] = {attr: {} for attr in self.state_tensors}
        for key, v in state.items():
            attr = next((a for a, sfx in keyed if key.endswith(sfx) and key not in counters), None)
            if attr is not None:
                parts[attr][key[:len(key) - len(self.state_tensors[attr])]] = v
        misfits = [f"{k} is {tuple(new[k].shape)}, not {tuple(v.shape)}" if k in new else f"{k} is missing"
                   for attr, new in parts.items() for k, v in getattr(self, attr).items()
                   if check and (k not in new or new[k].shape != v.shape)]
        if misfits:
            raise UsageError(f"{type(self).__name__} state does not fit this method ({len(misfits)} misfits, "
                             f"first: {misfits[0]}); load the state of the same method on the same model")
        for attr, new in parts.items():
            old = getattr(self, attr)
            dev = next(iter(old.values())).device if old else None
            setattr(self, attr, {k: v.to(old[k].device if k in old else dev, copy=True) if dev else v.clone()
                                 for k, v in new.items()})
        for attr, key in self.state_counters.items():
            setattr(self, attr, int(state.get(key, 0)))

    def to(self, device) -> "CreditMethod":
        """Move the declared state tensors to ``device``."""
        for attr in self.state_tensors:
            setattr(self, attr, {k: v.to(device) for k, v in getattr(self, attr).items()})
        return self
