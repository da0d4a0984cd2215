"""What the evaluator checks when it is built: the probe batches fit the model, and the model is the one trained.

Each refusal is one line naming the problem and the fix, before any measurement (never a raw torch error from
deep inside a forward).
"""

import torch

from ..errors import UsageError


def place_batches(batches: list, model, device) -> list:
    """The probe batches on ``device`` (None: where the model's parameters are), as ``(x, y)`` tuples."""
    if device is None:
        p = next(iter(model.parameters()), None)
        device = p.device if p is not None else torch.device("cpu")
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError):
        raise UsageError(f"device={device!r} not understood; use 'cpu', 'cuda' or 'cuda:N'") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"device={device}: CUDA is not available here; use device='cpu'")
    return [(x.to(device), y.to(device)) for x, y in batches]


def check_fit(model, batches: list, loss_fn, forward_states) -> None:
    """Refuse batches the model cannot take: dtype, feature shape, label type and range (the default loss's)."""
    dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()}
    for i, (x, _) in enumerate(batches):
        if x.is_floating_point() and dtypes and x.dtype not in dtypes:
            want = sorted(str(d).removeprefix("torch.") for d in dtypes)[0]
            raise UsageError(f"probe batch {i}: x is {str(x.dtype).removeprefix('torch.')} but the model's parameters "
                             f"are {want}; pass x.to(torch.{want}) (or convert the model)")
    x, y = batches[0]
    try:
        with torch.no_grad():
            logits = forward_states(model, x)[0]
    except (RuntimeError, ValueError, IndexError) as exc:
        first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
        own = getattr(model, "own_forward", None)  # an adapter: where the network's own forward takes x, it is the
        if own is not None:  # adapter's description that is wrong, not the batch (walk 30 W4)
            try:
                with torch.no_grad():
                    own(x)
            except (RuntimeError, ValueError, IndexError):
                pass
            else:
                raise UsageError(f"ResidualAdapter: embed → blocks → readout fails on probe batch 0 ({first}), where "
                                 "the network's own forward takes it; check that embed= names everything before "
                                 "the first block and readout= everything after the last") from None
        raise UsageError(f"probe batch 0: x of shape {tuple(x.shape)} does not fit the model ({first}); pass inputs "
                         "shaped as in training") from None
    if loss_fn is not None:
        return  # a loss of the caller's own reads its own targets
    classes = logits.shape[-1]
    for i, (_, y) in enumerate(batches):
        if y.dtype != torch.long:  # (F.cross_entropy takes int64 class indices only)
            raise UsageError(f"probe batch {i}: labels y are {str(y.dtype).removeprefix('torch.')}; cross-entropy "
                             "needs class indices: pass y.long() (or your own loss_fn=)")
        if y.dim() != 1 or y.shape[0] != x.shape[0]:
            raise UsageError(f"probe batch {i}: labels y of shape {tuple(y.shape)}; give one class index per example "
                             f"({x.shape[0]},)")
        lo, hi = int(y.min()), int(y.max())
        if lo < 0 or hi >= classes:
            raise UsageError(f"probe batch {i}: labels span {lo}..{hi} but the model has {classes} classes (0.."
                             f"{classes - 1}); relabel, or check the readout's width")
