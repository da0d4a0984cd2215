"""CIFAR training augmentation on the device: random crop with 4-px zero padding and horizontal flip (SPEC §2).

Vectorised over the batch (no per-sample Python): every example gets its own crop offset and flip from a
device generator, and one ``gather`` builds the whole augmented batch. It reproduces torchvision's
``RandomCrop(32, padding=4)`` → ``RandomHorizontalFlip()`` on raw images followed by ``Normalize``: the
padding is black pixels of the raw image, which on normalised tensors is ``−mean/std`` per channel
(``DataBundle.pad_value``), not 0. The test split is never augmented.
"""

import torch

AUGMENTS = ("crop+flip", "crop", "flip", "none")
PAD = 4


def augment_batch(x: torch.Tensor, kind: str, pad_value: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Augment a normalised image batch ``x`` (B, C, H, W); ``pad_value`` (C,) is a black pixel, normalised."""
    if kind == "none":
        return x
    b, c, h, w = x.shape
    dev = x.device
    rows = torch.arange(h, device=dev).expand(b, h)  # (B, H) source row of each output row
    cols = torch.arange(w, device=dev).expand(b, w)  # (B, W)
    p = PAD if "crop" in kind else 0
    if p:
        src = pad_value.to(x.dtype).view(1, c, 1, 1).repeat(b, 1, h + 2 * p, w + 2 * p)  # (B, C, H+2p, W+2p)
        src[:, :, p:p + h, p:p + w] = x
        off = torch.randint(0, 2 * p + 1, (2, b, 1), device=dev, generator=gen)  # offsets 0..2p inclusive
        rows, cols = rows + off[0], cols + off[1]
    else:
        src = x
    if "flip" in kind:
        flip = torch.rand(b, 1, device=dev, generator=gen) < 0.5  # (B, 1)
        cols = torch.where(flip, cols.flip(1), cols)
    wp = w + 2 * p
    idx = (rows[:, :, None] * wp + cols[:, None, :]).view(b, 1, h * w).expand(b, c, h * w)  # (B, C, H·W)
    return src.reshape(b, c, -1).gather(2, idx).view(b, c, h, w)
