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

    The batch is copied once into a frame with the 4-px border of ``pad_value`` and one ``gather`` reads every
    output pixel's source from it (cropped, then flipped). On two CPU cores that is 0.20 ms for a batch of 128
    against 0.34 ms for gathering from the unpadded batch and masking the border afterwards (same numbers,
    bit for bit; ``benchmarks/bench_augment.py``).
    """
    if kind == "none":
        return x
    b, c, h, w = x.shape
    dev = x.device
    p = PAD if off is not None else 0
    if p:
        src = x.new_empty(b, c, h + 2 * p, w + 2 * p)  # (N, C, H+8, W+8)
        src[:] = pad_value.to(x.dtype).view(1, c, 1, 1)
        src[:, :, p:p + h, p:p + w] = x
    else:
        src = x
    rows = torch.arange(h, device=dev).expand(b, h)  # (N, H) source row of each output row, in src
    cols = torch.arange(w, device=dev).expand(b, w)  # (N, W)
    if off is not None:
        rows, cols = rows + (off[0] + p), cols + (off[1] + p)
    if flip is not None:
        cols = torch.where(flip, cols.flip(1), cols)
    idx = (rows[:, :, None] * (w + 2 * p) + cols[:, None, :]).view(b, 1, h * w)
    return src.reshape(b, c, -1).gather(2, idx.expand(b, c, h * w)).view(b, c, h, w)


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
