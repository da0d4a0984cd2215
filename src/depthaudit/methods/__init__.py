"""Credit methods, looked up by name in :data:`METHODS`; register your own the same way."""

import inspect
from dataclasses import replace

from ..errors import UsageError
from ..seeds import derive_seed
from .base import METHODS, CreditMethod
from .bp import BP
from .credit_bridge import CreditBridge
from .credit_mix import CreditMix
from .dfa import DFA
from .dkp import DirectKolenPollack
from .drtp import DRTP
from .ep import EP
from .fa import FA
from .fa_stream import FAStream
from .forward_grad import ForwardGradient
from .kp import KolenPollack
from .options import Option, resolve
from .pfa import ProductFA
from .sign import BRSF, FRSF, USF
from .sign_dfa import SignDFA
from .specs import MethodSpec, parse_spec, with_flags
from .state_bridge import StateBridge
from .weight_mirror import WeightMirror

__all__ = ["METHODS", "CreditMethod", "BP", "FA", "DFA", "USF", "FRSF", "BRSF", "KolenPollack", "EP", "FAStream",
           "StateBridge", "CreditBridge", "WeightMirror", "DRTP", "SignDFA", "DirectKolenPollack", "ProductFA",
           "ForwardGradient", "build_method", "parse_method_spec",
           "MethodSpec", "Option", "parse_spec", "with_flags"]


def build_method(name: str, model, seed: int, credit_mix: float | None = None, cfg=None,
                 options: dict | None = None) -> CreditMethod:
    """Build a registered method for ``model``: ``METHODS.get(name)(model, feedback_seed, **options)``.

    ``seed`` is the run's seed (the feedback seed is derived from it); ``options`` are the method's own
    (validated against its declaration, defaults filled in), else those the run config ``cfg`` resolved. With
    ``credit_mix`` the method is wrapped in a :class:`CreditMix` toward BP.
    """
    cls = METHODS.get(name)
    opts = cfg.method_options if options is None and cfg is not None else resolve(name, cls, dict(options or {}))
    from ..plugins import defined_at

    clash = sorted(set(opts) & {"model", "seed"})  # (walk 15 case 100: "got multiple values for argument 'seed'")
    if clash:
        raise UsageError(f"method {name} ({defined_at(cls)}): its option {clash[0]!r} has the name of the argument "
                         f"every method is built with ({cls.__name__}(model, seed, **options)); rename the option")
    try:  # the call checked against the class's signature first: a TypeError raised inside its __init__ is the
        inspect.signature(cls).bind(model, 0, **opts)  # plug-in's own (named with its line by the caller)
    except TypeError as exc:
        if "unexpected keyword argument" in str(exc) and opts:
            raise UsageError(f"method {name} ({defined_at(cls)}): its class does not take its declared options "
                             f"({exc}); its __init__ must accept every option it declares ({', '.join(opts)}) as a "
                             "keyword") from None
        raise UsageError(f"method {name} ({defined_at(cls)}): it cannot be built as {cls.__name__}(model, seed"
                         f"{', **options' if opts else ''}) ({exc}); its __init__ must take (model, seed, **options) "
                         "— subclass depthaudit.methods.CreditMethod and call super().__init__(model, seed) "
                         "(docs/extending.md)") from None
    except ValueError:  # no signature to read (a builtin): the call itself says
        pass
    import os

    from ..plugins import back_to

    cwd = os.getcwd()
    try:
        method = cls(model, derive_seed(seed, "feedback"), **opts)
    finally:  # a plug-in's __init__ that moves the process: undone and said, so a relative --out stays the user's
        back_to(cwd, f"method {name}'s constructor ({defined_at(cls)})")  # (walk 43 case 13: written under /tmp)
    if not isinstance(method, CreditMethod):  # (walk 15 cases 98, 99: a function returning None, a class of its
        raise UsageError(f"method {name} ({defined_at(cls)}): building it gave a {type(method).__name__}, not a "  # own
                         "CreditMethod; register a subclass of depthaudit.methods.CreditMethod (docs/extending.md)")
    method.to(next(model.parameters()).device)
    return method if credit_mix is None else CreditMix(method, credit_mix)


def parse_method_spec(spec, base, flags: dict | None = None):
    """A ``--methods`` entry → ``(name, cfg)``: ``base`` running that method with its options.

    ``spec`` is a string (``fa:head=exact``, ``fa-stream:identity``, ``ep:beta=0.1``; a bare key means yes for
    a yes/no option) or an already parsed :class:`MethodSpec`. ``flags`` are options set by generated flags
    (``{"fa-head": "exact"}``), applied to every method that declares them unless the spec sets them itself.
    """
    ms = with_flags(parse_spec(spec), flags) if flags else parse_spec(spec)
    return ms.name, replace(base, method=ms.name, method_options=dict(ms.given))  # the config checks the options
