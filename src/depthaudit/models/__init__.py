"""Residual models, looked up by name in :data:`MODELS`."""

import inspect
import os

import torch

from ..errors import UsageError
from ..plugins import back_to, defined_at
from .adapter import ResidualAdapter
from .base import ResidualModel
from .resmlp import MODELS, LinearReadout, LNReadout, MLPBlock, ResMLP, StudentNet
from .vit import ViTMini

__all__ = ["MODELS", "ResidualAdapter", "ResidualModel", "ResMLP", "StudentNet", "MLPBlock", "LNReadout",
           "LinearReadout", "ViTMini", "build_model", "has_variants"]


def has_variants(arch: str) -> bool:
    """Whether ``arch`` is built in variants (its factory takes ``variant``); True for one not registered here."""
    return arch not in MODELS or "variant" in inspect.signature(MODELS.get(arch)).parameters


def build_model(arch: str, input_shape, num_classes: int, d_hidden: int, num_blocks: int,
                mlp_ratio: int | None, seed: int, variant: str = "ref") -> ResidualModel:
    """Build a registered model; weights drawn from a generator seeded with ``seed``.

    ``mlp_ratio=None`` takes the variant's own expansion (ResMLP ``ref``: 1). ``variant`` is passed to
    factories that take one (the built-in models); a user's factory without it only accepts ``ref``.
    """
    factory = MODELS.get(arch)
    kw = {"d_hidden": d_hidden, "num_blocks": num_blocks, "mlp_ratio": mlp_ratio, "seed": seed}
    if "variant" in inspect.signature(factory).parameters:
        kw["variant"] = variant
    elif variant != "ref":
        raise UsageError(f"--variant {variant}: --arch {arch} has no variants; leave --variant at ref")

    try:  # a factory (a user's) that cannot take what every model is built with: named, with its file and line
        inspect.signature(factory).bind(input_shape, num_classes, **kw)
    except TypeError as exc:
        raise UsageError(f"--arch {arch}: its factory {getattr(factory, '__name__', factory)} ({defined_at(factory)}) "
                         f"cannot be called as factory(input_shape, num_classes, {', '.join(f'{k}=' for k in kw)}): "
                         f"{exc}; add those parameters (or **kwargs)") from None
    cwd = os.getcwd()
    torch.manual_seed(seed)  # a factory that draws from torch's global stream without seeding it (a user's, built
    # from nn.Linear defaults) still builds the seed's weights: the trained and frozen runs of a seed start alike,
    # and a rerun elsewhere gets the same (walk 34 case 95). The built-in models draw from their own generators.
    try:
        model = factory(input_shape, num_classes, **kw)
    except ValueError as exc:  # a shape the architecture cannot take (e.g. heads, patch size)
        raise UsageError(f"--arch {arch}: {exc}") from None
    finally:
        back_to(cwd, f"--arch {arch}'s factory ({defined_at(factory)})")
    if not isinstance(model, ResidualModel):
        raise UsageError(f"--arch {arch}: its factory ({defined_at(factory)}) returned a {type(model).__name__}, "
                         "not a ResidualModel; wrap your network: ResidualAdapter(net, embed=..., blocks=..., "
                         "readout=...) (docs/extending.md)")
    if torch.empty(0).is_meta:  # (a sizing build under torch.device("meta"), loop.check_fits: the real build,
        return model  # with the user's numbers, is checked below)
    if model.num_blocks != num_blocks:  # every record says num_blocks: it must be the model's (walk 12 cases 30-32)
        raise UsageError(f"--arch {arch}: its factory ({defined_at(factory)}) built {model.num_blocks} residual "
                         f"blocks where num_blocks={num_blocks} was asked; build the number asked (records and "
                         "tables name the model by it)")
    meta = next((n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta), None)
    if meta is not None:
        raise UsageError(f"--arch {arch}: its factory ({defined_at(factory)}) returned a model whose {meta} is on the "
                         "meta device (no values); build it with real tensors (e.g. not under torch.device('meta'))")
    return model

