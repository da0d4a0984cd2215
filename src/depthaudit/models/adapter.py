"""Audit a user's own residual network: name its embedding, blocks and readout; the adapter does the rest.

    from depthaudit.models import ResidualAdapter
    model = ResidualAdapter(net, embed="stem", blocks="layers", readout=["norm", "head"],
                            block_includes_residual=True)

``blocks`` names an iterable of modules (an ``nn.ModuleList``/``nn.Sequential``), or is a list of module paths:
a flat ``nn.Sequential(stem, b1, b2, b3, head)`` is ``ResidualAdapter(net, embed="0", blocks=["1", "2", "3"],
readout="4")``. If each block already computes ``h + f(h)`` (``block_includes_residual=True``) the adapter audits
``f(h) = block(h) − h``. BP, DFA and every method that only reads stream states work on any adapted model;
FA-style methods need the blocks to provide ``feedback_weights``/``forward_cached``/``fa_vjp`` (see
``models/base.py``).

:meth:`ResidualAdapter.verify` (the evaluator calls it when it is built) proves the description: the adapter's
logits equal the network's own forward on a probe batch, and every block's branch vanishes when its parameters
do (so the block is ``h + f(h)``, not another function of ``h``).
"""

from collections.abc import Sequence

import torch
from torch import nn
from torch.func import functional_call

from ..errors import UsageError
from .base import ResidualModel

# the adapter's logits must equal the network's own to this max |Δ| relative to max(1, max |logits|)
FORWARD_TOLERANCE = 1e-4


class _Delta(nn.Module):
    """``f(h) = block(h) − h`` for a block that adds its own skip connection."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.block = block

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """The block's residual update."""
        return self.block(h) - h


class ResidualAdapter(ResidualModel):
    """A :class:`ResidualModel` view of a user's module; parameters are shared, not copied."""

    def __init__(self, net: nn.Module, embed: str, blocks: str | Sequence[str], readout: str | Sequence[str],
                 block_includes_residual: bool = False):
        super().__init__()
        self.__dict__["_net"] = net  # the user's network, for its own forward (not registered: no second copy)
        self.embed = _part(net, embed, "embed")
        if isinstance(blocks, str):
            container = _part(net, blocks, "blocks")
            try:
                blk = list(container)
            except TypeError:
                raise UsageError(f"ResidualAdapter: blocks={blocks!r} is a {type(container).__name__}, not a list of "
                                 "blocks; name their container (an nn.ModuleList/nn.Sequential) or list each "
                                 "block's path: blocks=['1', '2', '3']") from None
            self.block_names = [f"{blocks}.{i}" for i in range(len(blk))]
        else:
            self.block_names = [str(b) for b in blocks]
            blk = [_part(net, b, "blocks") for b in self.block_names]
        self.block_includes_residual = block_includes_residual
        self.blocks = nn.ModuleList(_Delta(b) if block_includes_residual else b for b in blk)
        names = [readout] if isinstance(readout, str) else list(readout)
        parts = [_part(net, n, "readout") for n in names]
        self.readout = parts[0] if len(parts) == 1 else nn.Sequential(*parts)

    def own_forward(self, x: torch.Tensor) -> torch.Tensor:
        """The network's own forward (what it was trained as): the function the adapter must reproduce."""
        return self._net(x)

    def verify(self, x: torch.Tensor) -> dict:
        """Refuse, in one line, an adapter that does not describe the network; ``{"logits_max_diff": …}`` if it does.

        1. Each block's branch vanishes when its parameters are zero (evaluated with zeroed copies; the network's
           own tensors are not touched): ``block(h) = h`` with ``block_includes_residual``, ``block(h) = 0``
           without. A block that is not ``h + f(h)`` (a plain MLP layer) or that adds its own skip while declared
           not to is refused, named by its path.
        2. embed → blocks → readout reproduces ``net(x)`` to :data:`FORWARD_TOLERANCE` (relative max |Δlogits|).
        """
        try:
            with torch.no_grad():
                states = self.stream(self.embed(x))  # the model's one walk (each block checked on its own input)
                mine = self.readout(states[-1])
        except (RuntimeError, ValueError, IndexError) as exc:  # (walk 30 W4: torch's raw error)
            first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
            raise UsageError(f"ResidualAdapter: embed → blocks → readout fails on x of shape {tuple(x.shape)} "
                             f"({first}); check that embed= names everything before the first block and readout= "
                             "everything after the last") from None
        with torch.no_grad():
            for name, blk, h in zip(self.block_names, self.blocks, states[:-1], strict=True):
                zeros = {n: torch.zeros_like(p) for n, p in blk.named_parameters()}
                branch = functional_call(blk, zeros, (h,)) if zeros else None
                if branch is not None and torch.is_tensor(branch) and branch.shape == h.shape:
                    left = (branch.abs().max() / h.abs().max().clamp_min(1e-12)).item()
                    if not left <= FORWARD_TOLERANCE:
                        how = ("block(h) − h is not its branch: with every parameter at zero it is still "
                               f"{left:.2f}·max|h|, so the block is not h + f(h)" if self.block_includes_residual
                               else f"with every parameter at zero it returns {left:.2f}·max|h|, not 0: it adds "
                               "its own skip (pass block_includes_residual=True) or is not a residual branch")
                        raise UsageError(f"ResidualAdapter: block {name!r}: {how}; describe only blocks of the form "
                                         "h + f(h)")
            own = self.own_forward(x)
        if not torch.is_tensor(own) or own.shape != mine.shape:
            got = tuple(own.shape) if torch.is_tensor(own) else type(own).__name__
            raise UsageError(f"ResidualAdapter: the network's own forward returns {got}, the adapter's readout "
                             f"{tuple(mine.shape)}; readout= must name everything after the last block")
        scale = own.abs().max().clamp_min(1.0)
        diff = ((mine - own).abs().max() / scale).item()
        if not diff <= FORWARD_TOLERANCE:
            raise UsageError(f"ResidualAdapter: embed → blocks → readout differs from {type(self._net).__name__}'s own "
                             f"forward by {diff:.2f} (relative max |Δlogits|, tolerance {FORWARD_TOLERANCE:g}); the "
                             "audit would measure another function: name every step of the forward (readout= all "
                             "modules after the last block, block_includes_residual= as the blocks compute)")
        return {"logits_max_diff": diff}


def _part(net: nn.Module, path: str, role: str) -> nn.Module:
    """``net``'s submodule at ``path``, or one line naming the paths there are."""
    try:
        return net.get_submodule(str(path))
    except AttributeError:
        names = [n for n, _ in net.named_children()]
        raise UsageError(f"ResidualAdapter: {role}={path!r}: {type(net).__name__} has no submodule {path!r}; its "
                         f"children are {', '.join(names) or 'none'}") from None
