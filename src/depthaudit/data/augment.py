"""CIFAR training augmentation on the device: random crop with 4-px zero padding and horizontal flip (SPEC §2).

Vectorised over the batch (no per-sample Python): every example gets its own crop offset and flip from a
device generator, and one ``gather`` builds the whole augmented batch. It reproduces torchvision's
``RandomCrop(32, padding=4)`` → ``RandomHorizontalFlip()`` on raw images followed by ``Normalize``: the
padding is black pixels of the raw image, which on normalised tensors is ``−mean/std`` per channel
(``DataBundle.pad_value``), not 0. The test split is never augmented.

The draw and the gather are separate (:func:`augment_draws`, :func:`apply_augment`) so R stacked runs each
draw from their own generator — the same numbers as when the run trains alone — and share one gather over
all R·B images (``batched.StackedStepper``).
"""

import torch

AUGMENTS = ("crop+flip", "crop", "flip", "none")
PAD = 4


def augment_draws(b: int, kind: str, device, gen: torch.Generator) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The random numbers of one batch of ``b`` images: crop offsets (2, B, 1) in −4..4 and flips (B, 1), or None."""
    off = torch.randint(-PAD, PAD + 1, (2, b, 1), device=device, generator=gen) if "crop" in kind else None
    flip = torch.rand(b, 1, device=device, generator=gen) < 0.5 if "flip" in kind else None
    return off, flip


def apply_augment(x: torch.Tensor, kind: str, pad_value: torch.Tensor, off: torch.Tensor | None,
                  flip: torch.Tensor | None) -> torch.Tensor:
    """Crop/flip a normalised batch ``x`` (N, C, H, W) by the draws ``off`` (2, N, 1) and ``flip`` (N, 1).

    No padded copy is built: each output pixel gathers its source pixel of the unpadded image (index
    clamped), and pixels whose source lies in the 4-px border take ``pad_value`` (3× faster than padding).
    """
    if kind == "none":
        return x
    b, c, h, w = x.shape
    dev = x.device
    rows = torch.arange(h, device=dev).expand(b, h)  # (N, H) source row of each output row
    cols = torch.arange(w, device=dev).expand(b, w)  # (N, W)
    if off is not None:
        rows, cols = rows + off[0], cols + off[1]
    if flip is not None:
        cols = torch.where(flip, cols.flip(1), cols)
    idx = (rows.clamp(0, h - 1)[:, :, None] * w + cols.clamp(0, w - 1)[:, None, :]).view(b, 1, h * w)
    out = x.reshape(b, c, h * w).gather(2, idx.expand(b, c, h * w)).view(b, c, h, w)
    if off is None:
        return out
    inside = ((rows >= 0) & (rows < h))[:, :, None] & ((cols >= 0) & (cols < w))[:, None, :]  # (N, H, W)
    return torch.where(inside[:, None], out, pad_value.to(x.dtype).view(1, c, 1, 1))


def augment_batch(x: torch.Tensor, kind: str, pad_value: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Augment a normalised image batch ``x`` (B, C, H, W); ``pad_value`` (C,) is a black pixel, normalised."""
    if kind == "none":
        return x
    return apply_augment(x, kind, pad_value, *augment_draws(x.shape[0], kind, x.device, gen))


def augment_runs(x: torch.Tensor, kind: str, pad_value: torch.Tensor, gens: list[torch.Generator]) -> torch.Tensor:
    """Augment R stacked runs' batches ``x`` (R, B, C, H, W); one gather serves all R·B images.

    Run r draws from ``gens[r]``: the numbers it draws when it trains alone.
    """
    if kind == "none":
        return x
    draws = [augment_draws(x.shape[1], kind, x.device, g) for g in gens]
    off = torch.cat([d[0] for d in draws], 1) if draws[0][0] is not None else None  # (2, R·B, 1)
    flip = torch.cat([d[1] for d in draws]) if draws[0][1] is not None else None  # (R·B, 1)
    return apply_augment(x.flatten(0, 1), kind, pad_value, off, flip).view_as(x)
