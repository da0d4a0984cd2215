"""Credit methods, looked up by name in :data:`METHODS`; register your own the same way."""

from .base import METHODS, CreditMethod
from .bp import BP
from .credit_bridge import CreditBridge
from .dfa import DFA
from .ep import EP
from .fa import FA
from .fa_stream import FAStream
from .kp import KolenPollack
from .sign import BRSF, FRSF, USF
from .state_bridge import StateBridge

__all__ = ["METHODS", "CreditMethod", "BP", "FA", "DFA", "USF", "FRSF", "BRSF", "KolenPollack", "EP", "FAStream",
           "StateBridge", "CreditBridge", "build_method", "parse_method_spec"]


def build_method(name: str, model, seed: int, credit_mix: float | None = None, cfg=None) -> CreditMethod:
    """Build a registered method for ``model``; ``seed`` is the run's seed (a feedback seed is derived).

    A method class with a ``from_config(model, seed, cfg)`` classmethod reads its own options from the
    run's config ``cfg`` (e.g. EP's β and steps). With ``credit_mix`` the method is wrapped in a
    :class:`CreditMix` toward BP.
    """
    from ..config import derive_seed
    from .credit_mix import CreditMix

    cls = METHODS.get(name)
    fseed = derive_seed(seed, "feedback")
    configurable = cfg is not None and hasattr(cls, "from_config")
    method = cls.from_config(model, fseed, cfg) if configurable else cls(model, fseed)
    device = next(model.parameters()).device
    if hasattr(method, "to"):
        method.to(device)
    return method if credit_mix is None else CreditMix(method, credit_mix)



def canonical_spec(spec: str) -> str:
    """One spelling per method row: ``fa:`` (an empty option list) is ``fa``; stray commas dropped."""
    name, colon, rest = spec.partition(":")
    items = [i for i in rest.split(",") if i]
    return f"{name}:{','.join(items)}" if colon and items else name


def parse_method_spec(spec: str, base):
    """``name`` or ``name:key=value,key=value`` → ``(name, cfg)``: ``base`` with the method and its options set.

    The keys are the method class's ``options`` (e.g. ``fa:head=exact``, ``fa-stream:identity=1,scale=0.5``,
    ``ep:beta=0.1``); a bare key means ``=1`` for a yes/no option (``fa-stream:identity``). This is how the
    audit and the ladder put variants of one method side by side, each row with its own frozen baseline.
    """
    import dataclasses
    import math

    from ..errors import UsageError

    name, _, rest = spec.partition(":")
    cls = METHODS.get(name)
    opts = getattr(cls, "options", {}) or {}
    types = {f.name: f.type for f in dataclasses.fields(base)}
    changes = {"method": name}
    seen = set()
    for item in filter(None, rest.split(",")):
        key, eq, val = item.partition("=")
        if key in seen:  # two values for one option: which one trained would be a guess
            raise UsageError(f"method spec {spec!r}: option {key!r} is given twice; give it once")
        seen.add(key)
        if key not in opts:
            known = ", ".join(opts) or "none"
            raise UsageError(f"method spec {spec!r}: {name} has no option {key!r} (its options: {known}); "
                             f"write e.g. {name}:{next(iter(opts), 'key')}=value")
        field = opts[key]
        current = getattr(base, field)
        try:
            if isinstance(current, bool):
                v = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}[
                    (val if eq else "1").lower()]
            elif isinstance(current, int):
                v = int(val)
            elif isinstance(current, float):
                v = float(val)
                if not math.isfinite(v):
                    raise ValueError
            else:
                v = val
        except (KeyError, ValueError):
            raise UsageError(f"method spec {spec!r}: {key}={val!r} is not a valid {type(current).__name__} "
                             f"({types.get(field)}{'; it must be finite' if isinstance(current, float) else ''})"
                             ) from None
        changes[field] = v
    try:  # the run config checks each option's range (e.g. cb:sigma=-1) as it does for the flag form
        return name, dataclasses.replace(base, **changes)
    except UsageError as exc:
        raise UsageError(f"method spec {spec!r}: {exc}") from None
