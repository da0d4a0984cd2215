"""Credit methods, looked up by name in :data:`METHODS`; register your own the same way."""

from .base import METHODS, CreditMethod
from .bp import BP
from .dfa import DFA
from .ep import EP
from .fa import FA
from .fa_stream import FAStream
from .kp import KolenPollack
from .sign import BRSF, FRSF, USF
from .state_bridge import StateBridge

__all__ = ["METHODS", "CreditMethod", "BP", "FA", "DFA", "USF", "FRSF", "BRSF", "KolenPollack", "EP", "FAStream",
           "StateBridge", "build_method"]


def build_method(name: str, model, seed: int, bridge_alpha: float | None = None, cfg=None) -> CreditMethod:
    """Build a registered method for ``model``; ``seed`` is the run's seed (a feedback seed is derived).

    A method class with a ``from_config(model, seed, cfg)`` classmethod reads its own options from the
    run's config ``cfg`` (e.g. EP's β and steps). With ``bridge_alpha`` the method is wrapped in a
    :class:`CreditBridge` toward BP.
    """
    from ..config import derive_seed
    from .bridge import CreditBridge

    cls = METHODS.get(name)
    fseed = derive_seed(seed, "feedback")
    configurable = cfg is not None and hasattr(cls, "from_config")
    method = cls.from_config(model, fseed, cfg) if configurable else cls(model, fseed)
    device = next(model.parameters()).device
    if hasattr(method, "to"):
        method.to(device)
    return method if bridge_alpha is None else CreditBridge(method, bridge_alpha)

