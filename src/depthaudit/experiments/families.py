"""Depth families: each kind of residual network ``saturation`` (and ``grow``) can deepen is one registered object.

A family knows how to check a sweep's configuration, load its data, build and train one depth, name the tangent
space its zero block opens (V), grow one arm, and title its tables; the commands and the API ask the registry
:data:`FAMILIES` and never switch on the family's name. It knows neither the sweeps nor the report: the runners
(:func:`~depthaudit.experiments.saturation.run_depth`, :func:`~depthaudit.experiments.grow.run_arm`) look their
family up here, and the report (:mod:`depthaudit.report.saturation`) asks it for titles. The CLI's ``--family``
choices are the registry's keys (``grow``: the families with ``growable``). Register your own (in a ``--plugin``
module, so spawned workers see it too)::

    from depthaudit.experiments.families import FAMILIES, DepthFamily

    @FAMILIES.register("mine")
    class Mine(DepthFamily):
        help = "my residual net (plain backprop)"
        def build(self, run, data, device):          # the model of base + run.extra blocks, on the device
            return MyNet(data.num_classes, blocks=1 + run.extra, seed=run.seed).to(device)

A family's model is a depthaudit ``ResidualModel`` (``blocks``, ``forward(x, return_states=True)``), so AG, V and
the gradient-matched insertion measure it as they measure the built-in ones. The registry holds instances: the
decorator instantiates a class it is given.

Nothing here imports torch at module level (``--help`` builds ``--family``'s choices from this registry).
"""

# imports inside functions: torch-loading modules are imported where used: the CLI's parser reads the families here
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import ConfigError, UsageError
from ..io import why_not_a_file
from ..registry import Registry
from ..seeds import derive_seed
from ..stores import STORE_NAME, FileStore


def budget_text(cfg: dict) -> str:
    """``"N epochs"``, or ``"first S of N epochs"`` when ``--stop-after S`` cut the runs short (every card says it).

    ``", optimizer sgd"`` follows when the runs trained under another optimizer than the recipe's AdamW (walk 19
    case 113: an SGD card read as the recipe's).
    """
    ep = cfg.get("epochs", "?")
    opt = f", optimizer {cfg['optimizer']}" if cfg.get("optimizer") not in (None, "adamw") else ""
    return (f"{ep} epochs" if cfg.get("stop_after") is None else f"first {cfg['stop_after']} of {ep} epochs") + opt \
        + "".join(f", {x}" for x in _recipe_changes(cfg))


def _recipe_changes(cfg: dict) -> list[str]:
    """The recipe's numbers a run changed from its optimizer's defaults (``lr 0.002``): a card says them.

    (Walk 24 case 105: an --lr 0.002 audit's card read exactly like the protocol recipe's.)
    """
    from ..optim import OPTIMIZERS

    meta = OPTIMIZERS.meta(cfg.get("optimizer") or "adamw")
    out = [f"{name} {cfg[k]:g}" for k, name in (("lr", "lr"), ("weight_decay", "weight decay"))
           if isinstance(cfg.get(k), int | float) and k in meta and cfg[k] != meta[k]]
    if isinstance(cfg.get("batch_size"), int) and cfg["batch_size"] != 128:
        out.append(f"batch {cfg['batch_size']}")
    if isinstance(cfg.get("scale_penalty"), int | float) and cfg["scale_penalty"] > 0:  # (walk 26 case 131)
        out.append(f"scale penalty λ {cfg['scale_penalty']:g} ({cfg.get('penalty_form', 'abs')}, "
                   f"{cfg.get('penalty_reduction', 'example')})")
    from ..models.resmlp import DEFAULT_RATIO

    ratio = 4 if cfg.get("arch") == "vit" else DEFAULT_RATIO.get(cfg.get("variant"))
    if isinstance(cfg.get("mlp_ratio"), int) and ratio is not None and cfg["mlp_ratio"] != ratio:
        out.append(f"mlp ratio {cfg['mlp_ratio']}")
    return out


def _uses(cfg) -> dict:
    """The registered names a family's run ran (provenance names the plug-in code among them)."""
    method = getattr(cfg, "method", None)
    return {"method": str(method).partition(":")[0] if method else None, "dataset": getattr(cfg, "dataset", None),
            "family": getattr(cfg, "family", None), "arch": getattr(cfg, "arch", None)}


class _FamilyRegistry(Registry):
    """A :class:`~depthaudit.registry.Registry` of family instances (a registered class is instantiated)."""

    factories = False

    def register(self, name: str, *, overwrite: bool = False, **meta):
        inner = super().register(name, overwrite=overwrite, **meta)

        def deco(obj):
            inst = obj() if isinstance(obj, type) else obj
            inst.name = name
            inner(inst)
            return obj

        return deco


FAMILIES = _FamilyRegistry("depth family")


def family_of(ident: dict) -> DepthFamily:
    """The family a stored results file names (files written before families existed: ``resnet``).

    A family that is not registered here (a plug-in not imported) renders with the generic titles.
    """
    name = ident.get("family", "resnet")
    if name in FAMILIES:
        return FAMILIES.get(name)
    fam = DepthFamily()
    fam.name = name
    return fam


def slug(spec: str) -> str:
    """A method spec as a file-name part (``fa-stream:identity`` → ``fa-stream-identity``)."""
    return spec.replace(":", "-").replace("=", "").replace(",", "-")


@dataclass
class Trained:
    """One depth after training: the model, the data it was measured on and what the loop returned."""

    model: Any
    data: Any
    history: list
    status: str
    loss_fn: Any = None  # None: cross-entropy
    method: Any = None  # the credit method the run trained under (resmlp), for AG/V from its own credit
    recipe: Any = None  # the recipe's TrainConfig (resmlp), stored in the record


class DepthFamily:
    """A family of residual networks for the depth commands; subclass and register (see the module docstring).

    The defaults are those of a plain-backprop family on an image/vector dataset (any dataset; AdamW, cosine, the
    recipe's defaults) whose blocks' zero insertion is :func:`depthaudit.depth.insert.zero_block`.
    """

    name: str = ""
    help: str = ""  # a few words for ``--family``'s help
    under_method = False  # trains under ``--method`` (the audit's recipe); else plain backprop
    growable = False  # ``grow`` can grow it
    uses_base_width = False  # reads ``--base-width`` (ResNet's stage widths); elsewhere it is held at its default
    uses_arch = True  # builds ``--arch`` (a registered residual model); a family with a model of its own: False, and
    # the configs hold ``arch`` at its default (walk 21 W6: --arch made another gpt run, bit-identical)
    pretrained = False  # measures given models (``--model``): a cell (run_pretrained) and a table row per model
    needs_images = False  # trains on images only (ResNet-CIFAR): a missing image set's fixes say so
    reads_text = False  # trains on ``--text`` (its budget is DEFAULT_EPOCHS), not on an image/vector dataset
    default_d_hidden: int | None = None  # width when ``--d-hidden`` is not given (None: the family has none)
    default_batch_size = 128

    # -- configuration ---------------------------------------------------------------------------------------

    def resolve(self, cfg, command: str):
        """``cfg`` with the family's defaults filled in (width, batch size, canonical method spec), checked."""
        if command == "grow" and type(self).grow_arm is DepthFamily.grow_arm:  # (walk 16 cases 107, 108: marked
            from ..plugins import defined_at  # growable with no grow_arm: it failed after the store was claimed)

            raise UsageError(f"--family {self.name} ({defined_at(type(self))}): it is marked growable but defines no "
                             "grow_arm(run, data, log, argv, t0); define it (docs/extending.md) or drop growable")
        if command == "saturation" and not self.pretrained and (
                cfg.model or cfg.revision or cfg.continue_steps or cfg.importance is not None or cfg.grow_steps):
            raise UsageError("--model, --revision, --continue-steps, --importance and --grow-steps are for "
                             "pretrained models; add --family hf")
        return replace(cfg, method=self.method_spec(cfg.method, command),
                       d_hidden=cfg.d_hidden or self.default_d_hidden,
                       batch_size=cfg.batch_size or self.default_batch_size)

    def method_spec(self, method: str | None, command: str) -> str | None:
        """The canonical method spec the family trains under (None: plain backprop)."""
        if not self.under_method:
            if method is not None:
                raise ConfigError(f"{{method={method}}}: the {self.name} family takes no method (it always trains "
                                  "with plain backprop: a credit method needs one residual stream); drop {method}, "
                                  f"or use {{family=resmlp}} with {{method={method}}}")  # (walk 40 case 61: "trains "
                # with plain backprop" refused --method bp, which read as self-contradictory)
            return None
        from ..methods import METHODS, parse_spec

        parsed = parse_spec(method or "bp")  # a misspelt method or option: one line naming the known ones
        from ..methods.options import resolve

        resolve(parsed.name, METHODS.get(parsed.name), dict(parsed.given))  # its values too (walk 17 case 70)
        spec = str(parsed)
        if command == "grow" and not METHODS.get(spec.partition(":")[0]).growable:
            able = ", ".join(n for n in METHODS.names() if METHODS.get(n).growable)
            raise UsageError(f"--method {spec}: its state is built for a fixed depth and cannot grow; "
                             f"use one of {able}")
        return spec

    def checked_method(self, cfg, command: str) -> None:
        """:meth:`method_spec` for a sweep config being built: a refusal is its ``ConfigError`` naming ``method``.

        (walk 17 cases 68, 70: a misspelt method, a bad option value or an ungrowable method was a plain
        UsageError, or named ``method_options``, not the ``method`` keyword the caller wrote.)
        """
        from ..fields import refuse

        try:
            self.method_spec(cfg.method, command)
        except ConfigError as exc:
            if exc.field == "method" and exc.template.startswith("{method="):  # the family's own refusal, already
                raise refuse(cfg, exc.template) from None  # in the config's fields (walk 29 W10)
            msg = str(exc).removeprefix("method_options: ")  # (an option's own: named as the method, as below)
            raise refuse(cfg, "{method} " + msg[len("--method "):] if msg.startswith("--method ")
                         else f"{{method}} {cfg.method!r}: {msg}") from None
        except UsageError as exc:  # "--method X: …" (family), "unknown method 'X' …" (registry), an option's own
            msg = str(exc).removeprefix("method_options: ")
            raise refuse(cfg, "{method} " + msg[len("--method "):] if msg.startswith("--method ")
                         else f"{{method}} {cfg.method!r}: {msg}") from None

    def check(self, cfg, command: str) -> None:
        """Refuse flags the family does not use (before any data is read)."""

    def load(self, cfg, command: str, data=None):
        """``(data, name, sha256)``: the data of the sweep (``data`` if given), the name in file names, its hash."""
        import torch

        from ..data import DATASETS, load_data
        from ..data.base import unchanged_data
        from ..errors import ConfigError

        if data is None and cfg.dataset not in DATASETS:  # (walk 17 case 69: a plain UsageError with no .field)
            raise ConfigError(f"{{dataset}} {cfg.dataset!r} not known; use one of {', '.join(DATASETS.names())} (or "
                              "register your own first)")
        try:
            data = unchanged_data(data) if data is not None else load_data(
                cfg.dataset, cfg.data_dir, cfg.download, torch.device(cfg.device), fingerprint=False)
        except ConfigError as exc:  # (walk 20 W8: "or use --dataset mnist1d", which an image family then refuses)
            if self.needs_images and "{dataset=mnist1d}" in exc.template:
                raise ConfigError(exc.template.replace("{dataset=mnist1d}", "{family=resmlp} (any dataset, e.g. "
                                                       "{dataset=mnist1d})"), exc.flags) from None
            raise
        self.check_data(cfg, data, command)
        return data, cfg.dataset, data.sha256

    def check_data(self, cfg, data, command: str) -> None:
        """Refuse data the family cannot train on."""

    def check_deepest(self, run, data) -> None:
        """Refuse, before any training, the sweep's deepest depth where it cannot fit (default: nothing to check)."""

    def check_recipe(self, run, data) -> None:
        """Refuse, before any training, a run the family cannot build (e.g. an incompatible model and method).

        Default: a plug-in family with a :meth:`build` of its own builds the run on the CPU and checks it
        (:meth:`built`) — before the sweep's store is claimed (walk 29 W13: the refusal came after, and its claim
        then refused the next sweep into the folder).
        """
        if type(self).__module__.startswith("depthaudit.") or type(self).build is DepthFamily.build \
                or self.pretrained or data is None:  # (the built-in families check their own)
            return
        import torch

        self.built(self.build(run, data, torch.device("cpu")), data)

    def sweep_data(self, data):
        """What the sweep hands its runners in process (None: each run loads its own)."""
        return data

    # -- saturation ------------------------------------------------------------------------------------------

    def saturation_identity(self, cfg) -> dict:
        """Family-specific entries of the saturation store's identity (beside the shared ones)."""
        return {}

    def saturation_part(self, cfg) -> str:
        """The family's part of the saturation file name (``saturation_{part}_{data}.json``)."""
        return self.name

    def saturation_store(self, cfg, out, name: str, sha: str | None):
        """The sweep's store ``out/saturation_{part}_{name}.json``: the shared identity and the family's entries."""
        ident = {"family": self.name, "data": name, "data_sha256": sha, "epochs": cfg.epochs, "seed": cfg.seed,
                 "batch_size": cfg.batch_size, "lr": cfg.lr, "weight_decay": cfg.weight_decay,
                 "analysis_batches": cfg.analysis_batches, **self.saturation_identity(cfg)}
        if getattr(cfg, "stop_after", None) is not None:  # (absent when not given: earlier files stay the same file)
            ident["stop_after"] = cfg.stop_after
        for k in ("analysis_split", "low_signal", "delta", "margin", "alpha"):  # the measurement's settings, each
            default = type(cfg).__dataclass_fields__[k].default  # stored in every depth's record: another value is
            if getattr(cfg, k, default) != default:  # another sweep, refused as one (walk 21 W3: the depths were
                ident[k] = getattr(cfg, k)  # "changed files", retrained and replaced); absent at the default
        return FileStore(Path(out) / f"saturation_{self.saturation_part(cfg)}_{name}.json", "depthaudit.saturation.v1",
                         ident)

    def build(self, run, data, device):
        """The model of ``run``'s depth (base + ``run.extra`` blocks) on ``device``, at initialisation."""
        raise NotImplementedError(f"depth family {self.name!r} does not build a model")

    def run_data(self, run, data, device):
        """The data one run trains on: the sweep's (in process), else loaded from the run's config."""
        from ..data import load_data

        return data if data is not None else load_data(run.dataset, run.data_dir, False, device, fingerprint=False)

    def train_depth(self, run, data, device, log) -> Trained:
        """Build and train one depth of the saturation sweep (default: plain backprop, the recipe's AdamW/cosine).

        ``data`` is the sweep's data in process, or None (a worker): :meth:`run_data` loads it.
        """
        from ..loop import train_plain

        data = self.run_data(run, data, device)
        model = self.built(self.build(run, data, device), data)
        hist, status = train_plain(model, data, run.epochs, run.batch_size, run.lr, run.weight_decay, run.seed,
                                   device, log, stop_after=run.stop_after)
        return Trained(model, data, hist, status)

    def built(self, model, data):
        """``model`` if :meth:`build` gave what the sweep measures (residual ``blocks``, one logit per class).

        Else one line naming the family (walk 14 cases 93, 94: an ``nn.Linear`` was blamed on a credit method's
        output; 15 logits for 10 classes trained and was stored with no word).
        """
        import torch

        from ..loop import check_readout
        from ..plugins import defined_at

        who = f"--family {self.name} ({defined_at(type(self))})"
        blocks = getattr(model, "blocks", None)
        if not isinstance(model, torch.nn.Module) or not isinstance(blocks, torch.nn.ModuleList):
            raise UsageError(f"{who}: its build() returned a {type(model).__name__}, not a residual model with its "
                             "blocks (`blocks`, forward(x, return_states=True)); return the model of base + N blocks "
                             "(wrap your network: ResidualAdapter, docs/extending.md)")
        check_readout(model, data, None, who=who)
        return model

    def tangent(self, model, seed_of):
        """``(feature_fn, value_fn)`` for :func:`~depthaudit.depth.growth.activation_gradients`.

        The tangent space of the zero block the matched insertion puts at each position (default: its ``[ψ, 1]``).
        """
        from ..depth.growth import zero_block_features

        return zero_block_features(model, seed_of), None

    def describe(self, run) -> str:
        """One line for ``--list-cells``."""
        return f"{self.name} base + {run.extra} blocks on {run.dataset}"

    # -- grow ------------------------------------------------------------------------------------------------

    def grow_identity(self, cfg) -> dict:
        """Family-specific entries of the growth store's identity."""
        return {}

    def grow_name(self, cfg) -> str:
        """The growth file's name part (``grow_{name}_{dataset}.json``)."""
        return f"{self.name}{cfg.base_blocks}+{cfg.extra}"

    def grow_arm(self, run, data, log, argv, t0) -> dict:
        """Train one arm (``grown`` or ``scratch``) and return its record."""
        raise UsageError(f"--family {self.name}: this family cannot grow")

    # -- titles (from a stored identity alone: ``depthaudit report`` writes the same) ------------------------

    def saturation_what(self, ident: dict) -> str:
        """What the saturation table measured, for its title."""
        return f"{ident.get('family', self.name)} on {ident.get('data', '?')}"

    def saturation_title(self, ident: dict) -> str:
        """The saturation table's title."""
        return f"Depth saturation: {self.saturation_what(ident)}, {budget_text(ident)}"

    def figure_what(self, ident: dict) -> str:
        """The model in the saturation figure's title."""
        return self.saturation_what(ident).rsplit(" on ", 1)[0]

    accuracy_label = "test accuracy"  # the saturation figure's second axis

    def grow_what(self, ident: dict) -> str:
        """The grown model, for the growth table's and figure's titles."""
        return f"{ident.get('family', self.name)} {ident.get('base_blocks', '?')} + {ident.get('extra', '?')}"

@FAMILIES.register("resnet")
class ResNetFamily(DepthFamily):
    """ResNet-CIFAR: ResNet-8 + N BasicBlocks (extra block i at the end of stage i mod 3), plain backprop."""

    help = "ResNet-8 + N, images"
    growable = True
    uses_base_width = True
    uses_arch = False
    needs_images = True

    def check(self, cfg, command: str) -> None:
        if command == "saturation" and (cfg.text is not None or cfg.d_hidden is not None):
            given = "--text" if cfg.text is not None else "--d-hidden"
            raise UsageError(f"{given} is for --family {'gpt/hf' if given == '--text' else 'gpt/resmlp'}; ResNet-8 + N "
                             "reads images and has fixed widths")

    def resolve(self, cfg, command: str):
        cfg = super().resolve(cfg, command)
        return cfg if command == "saturation" else replace(cfg, d_hidden=cfg.d_hidden or 256)  # (grow stores 256)

    def check_data(self, cfg, data, command: str) -> None:
        if len(data.input_shape) != 3:
            raise ConfigError(f"{command} trains ResNet-CIFAR on images; {{dataset={cfg.dataset}}} is not an image "
                              "dataset ({family=resmlp} takes any dataset)")  # (keywords from Python: walk 29 W10)

    def saturation_identity(self, cfg) -> dict:
        return {"base_width": cfg.base_width} if cfg.base_width != 16 else {}  # (absent at the default: same file)

    def build(self, run, data, device):
        from ..models.resnet import ResNetCIFAR

        return ResNetCIFAR(data.num_classes, run.extra, run.seed, data.input_shape[0], run.base_width).to(device)

    def tangent(self, model, seed_of):
        from ..depth.growth import resnet_value

        return None, resnet_value(model, seed_of)  # bn2's γ, β per channel, behind the ReLU after the sum

    def describe(self, run) -> str:
        if hasattr(run, "arm"):
            return f"resnet-8 + {run.extra} {_how(run)}"
        return f"resnet-8 + {run.extra} blocks on {run.dataset}"

    def grow_identity(self, cfg) -> dict:
        return {"base_width": cfg.base_width} if cfg.base_width != 16 else {}

    def grow_name(self, cfg) -> str:
        return f"resnet8+{cfg.extra}"

    def grow_arm(self, cfg, data, log, argv, t0) -> dict:
        """Plain backprop; extra block i joins at the end of stage i mod 3."""
        import torch

        from ..loop import evaluate, fit, plain_step
        from ..models.resnet import ResNetCIFAR
        from ..provenance import provenance

        device = torch.device(cfg.device)
        grown = cfg.arm == "grown"
        model = ResNetCIFAR(data.num_classes, 0 if grown else cfg.extra, cfg.seed, data.input_shape[0],
                            cfg.base_width).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        inserted = 0

        def insert_due(epoch: int) -> None:  # growth: zero-output blocks join at the start of their epochs
            nonlocal inserted
            while grown and inserted < cfg.extra and cfg.insert_at[inserted] <= epoch:
                pos = model.stage_end(inserted % 3)
                model.insert_zero_block(pos, seed=derive_seed(cfg.seed, f"grow{inserted}") % 2**31, inplace=True)
                opt.add_param_group({"params": list(model.blocks[pos].parameters())})
                inserted += 1

        def blocks(epoch: int, rec: dict, diverged: bool) -> None:
            rec["blocks"] = len(model.blocks)

        model.train()
        hist, status = fit(data.x_train.shape[0], cfg.batch_size, cfg.epochs, cfg.lr, cfg.seed, device,
                           plain_step(model, opt, data), lambda: evaluate(model, data.x_test, data.y_test, 500),
                           last_epoch=cfg.stop_after, on_epoch_start=insert_due, on_epoch_end=blocks,
                           log=log or (lambda m: None),
                           budget_note=f"{cfg.arm}: ")
        train_loss = evaluate(model, data.x_train, data.y_train, 1000)[0]
        final = {"train_loss": train_loss, "test_loss": hist[-1]["test_loss"] if hist else None,
                 "test_acc": hist[-1]["test_acc"] if hist else None, "blocks": len(model.blocks)}
        return {"schema": "depthaudit.grow_run.v1", "status": status, "config": cfg.to_dict(), "tracking": None,
                "provenance": provenance(device, data.provenance(), cfg.seed, argv, uses=_uses(cfg)), "history": hist,
                "final": final,
                "timing": {"seconds": round(time.perf_counter() - t0, 3)}}

    def saturation_what(self, ident: dict) -> str:
        return f"ResNet-CIFAR on {ident.get('data', '?')}"

    def figure_what(self, ident: dict) -> str:
        return "ResNet-8 + N"

    def grow_what(self, ident: dict) -> str:
        return f"ResNet-8 + {ident.get('extra', '?')}"


@FAMILIES.register("gpt")
class GPTFamily(DepthFamily):
    """A pre-LN causal decoder of base + N blocks on text (``--text``, default the embedded one), plain backprop."""
    reads_text = True
    uses_arch = False

    help = "decoder, text"
    default_d_hidden = 64
    accuracy_label = "next-token test accuracy"

    def check(self, cfg, command: str) -> None:
        if cfg.d_hidden is not None and cfg.d_hidden % 4:  # (--data-dir: noted and held at None by the config)
            raise UsageError(f"--d-hidden {cfg.d_hidden}: the GPT decoder has 4 heads, so the width must be a "
                             "multiple of 4 (e.g. 64)")

    def load(self, cfg, command: str, data=None):
        import torch

        from ..data.text import load_text

        data = load_text(cfg.text, cfg.context, torch.device(cfg.device))  # validates the text now
        return data, "text", data.sha256

    def sweep_data(self, data):
        return None  # each run reads its text (by name) itself

    def saturation_identity(self, cfg) -> dict:
        return {"context": cfg.context, "d_hidden": cfg.d_hidden, "base_blocks": cfg.base_blocks}

    def train_depth(self, run, data, device, log) -> Trained:
        from ..data.text import load_text
        from ..loop import train_plain
        from ..models.gpt import GPTDecoder, lm_loss

        data = load_text(run.text, run.context, device)
        model = GPTDecoder(data.vocab, run.context, run.d_hidden, run.base_blocks + run.extra, seed=run.seed)
        model = model.to(device)
        hist, status = train_plain(model, data, run.epochs, run.batch_size, run.lr, run.weight_decay, run.seed,
                                   device, log, loss_fn=lm_loss, stop_after=run.stop_after)
        return Trained(model, data, hist, status, loss_fn=lm_loss)

    def describe(self, run) -> str:
        return f"gpt d={run.d_hidden}, {run.base_blocks} + {run.extra} blocks"

    def saturation_what(self, ident: dict) -> str:
        return f"GPT decoder (d={ident.get('d_hidden')}) on text"

    def figure_what(self, ident: dict) -> str:
        return f"GPT decoder d={ident.get('d_hidden')}"


@FAMILIES.register("resmlp")
class ResMLPFamily(DepthFamily):
    """Any registered residual model (``--arch``) of base + N blocks under a credit method (``--method``).

    Trained with the audit's recipe; AG and V are also measured from the method's own credit.
    """

    help = "--arch under --method"
    under_method = True
    growable = True
    default_d_hidden = 256

    def check_deepest(self, run, data) -> None:
        """Refuse, before the sweep's first depth trains, a deepest depth that cannot fit the device's memory."""
        from ..loop import check_fits

        try:
            check_fits(run.recipe(), data)
        except UsageError as exc:  # (walk 31 W4: found when its turn came, after the shallower depths trained)
            raise UsageError(f"--extra {run.extra}: {str(exc).split(': ', 1)[1]}".replace(
                "give fewer blocks or a narrower model", "give a smaller --extra or a narrower --d-hidden")) from None

    def check_recipe(self, run, data) -> None:
        from ..loop import build

        model, _ = build(replace(run.recipe(), device="cpu"), data)  # reads only the data's shapes: refused before
        if hasattr(run, "arm") or type(self).tangent is not DepthFamily.tangent:  # training; a sweep's AG and V
            return  # need the zero block's tangent space (grow does not)
        from ..depth.insert import zero_block
        from ..models.adapter import _Delta

        blk = zero_block(model, 0)
        if not hasattr(blk, "tangent_features") and not hasattr(blk, "fc1"):  # (walk 29 W11: after training, a
            own = blk.block if isinstance(blk, _Delta) else blk  # traceback: "'_Delta' has no attribute 'fc1'")
            raise UsageError(f"--arch {run.arch}: saturation measures AG and V in a zero block's tangent space "
                             f"[ψ, 1], read from the block's tangent_features(h) or its ln/fc1 (a ResMLP block); "
                             f"its blocks ({type(own).__name__}) have neither: give them tangent_features(h) "
                             "(docs/extending.md), or use grow, which needs no tangent space")

    def check(self, cfg, command: str) -> None:
        if getattr(cfg, "text", None) is not None:  # (walk 15 cases 90, 93: taken without a word, even a missing
            raise UsageError(f"--text is for --family gpt/hf; --family {self.name} trains on --dataset")  # file)

    def saturation_identity(self, cfg) -> dict:
        return {"arch": cfg.arch, "d_hidden": cfg.d_hidden, "base_blocks": cfg.base_blocks, "method": cfg.method,
                **({"optimizer": cfg.optimizer} if cfg.optimizer != "adamw" else {})}  # (absent at adamw: same file)

    def saturation_part(self, cfg) -> str:
        return f"{cfg.arch}_{slug(cfg.method)}"

    def train_depth(self, run, data, device, log) -> Trained:
        from ..loop import train

        recipe = run.recipe()
        data = self.run_data(run, data, device)
        out = train(recipe, data, log=log)
        return Trained(out.model, data, out.history, out.status, method=out.method, recipe=recipe)

    def describe(self, run) -> str:
        if hasattr(run, "arm"):
            return f"{run.arch} {run.base_blocks} + {run.extra} under {run.method}, {_how(run)}"
        return f"{run.arch} d={run.d_hidden}, {run.base_blocks} + {run.extra} blocks under {run.method}"

    def grow_identity(self, cfg) -> dict:
        return {"family": "resmlp", "arch": cfg.arch, "d_hidden": cfg.d_hidden, "base_blocks": cfg.base_blocks,
                "method": cfg.method, **({"optimizer": cfg.optimizer} if cfg.optimizer != "adamw" else {})}

    def grow_name(self, cfg) -> str:
        return f"{cfg.arch}{cfg.base_blocks}+{cfg.extra}_{slug(cfg.method)}"

    def grow_arm(self, cfg, data, log, argv, t0) -> dict:
        """The audit's recipe under the method; new blocks join on top of the stream from an epoch-start hook."""
        import torch

        from ..depth.insert import insert_zero_block
        from ..loop import evaluate, train
        from ..provenance import provenance

        grown, inserted = cfg.arm == "grown", 0

        def insert_due(epoch: int, stepper) -> None:  # zero blocks join on top of the stream at their epochs
            nonlocal inserted
            while grown and inserted < cfg.extra and cfg.insert_at[inserted] <= epoch:
                model, pos = stepper.model, stepper.model.num_blocks
                seed = derive_seed(cfg.seed, f"grow{inserted}") % 2**31
                insert_zero_block(model, pos, seed, inplace=True)
                stepper.opts[0].add_param_group({"params": list(model.blocks[pos].parameters()),
                                                 "name": f"block{pos + 1}"})
                stepper.method = stepper.method.grown(model, pos + 1, derive_seed(seed, "feedback"))
                inserted += 1

        recipe = cfg.recipe()
        log = log or (lambda m: None)
        run = train(recipe, data, log=lambda m: log(f"{cfg.arm}: {m}"), on_epoch_start=insert_due)
        model = run.model
        train_loss = evaluate(model, data.x_train, data.y_train, 1000)[0] if run.status != "diverged" else None
        final = {"train_loss": train_loss, "test_loss": run.final["test_loss"], "test_acc": run.final["test_acc"],
                 "blocks": len(model.blocks)}
        return {"schema": "depthaudit.grow_run.v1", "status": run.status, "config": cfg.to_dict(), "tracking": None,
                "recipe": recipe.to_dict(),
                "provenance": provenance(torch.device(cfg.device), data.provenance(), cfg.seed, argv, uses=_uses(cfg)),
                "history": run.history, "final": final, "timing": {"seconds": round(time.perf_counter() - t0, 3)}}

    def saturation_what(self, ident: dict) -> str:
        return (f"{ident.get('arch', 'resmlp')} (d={ident.get('d_hidden')}) under {ident.get('method')} "
                f"on {ident.get('data')}")

    def figure_what(self, ident: dict) -> str:
        return f"{ident.get('arch', 'resmlp')} d={ident.get('d_hidden')} under {ident.get('method')}"

    def grow_what(self, ident: dict) -> str:
        return (f"{ident.get('arch')} d={ident.get('d_hidden')} {ident.get('base_blocks')} + {ident.get('extra')} "
                f"under {ident.get('method')}")


@FAMILIES.register("hf")
class PretrainedFamily(DepthFamily):
    """Pretrained causal LMs (``--model``: Hub names, local folders, ``.gguf`` files): one cell per model.

    AG and V at every layer boundary, optionally after continued pretraining (needs ``depthaudit[hf]``).
    """

    help = "pretrained --model"
    pretrained = True
    reads_text = True
    uses_arch = False
    default_batch_size = 8  # 8 windows of --context tokens: fits a CPU, and a GPU for the larger Pythias
    default_importance = (1, 2, 4, 8)  # ``--importance`` given alone: n of the angular distance and pruned sets

    def resolve(self, cfg, command: str):
        from ..models.hf import require_transformers

        require_transformers()
        if not cfg.model:
            raise UsageError("--family hf needs --model NAME_OR_PATH [...] (e.g. EleutherAI/pythia-70m-deduped)")
        cfg = replace(super().resolve(cfg, command), model=tuple(dict.fromkeys(cfg.model)))
        if cfg.importance is not None:
            cfg = replace(cfg, importance=tuple(sorted(set(cfg.importance or self.default_importance))))
        return cfg

    def check(self, cfg, command: str) -> None:
        if cfg.text is not None and not Path(cfg.text).is_file():
            raise UsageError(f"--text {cfg.text}: {why_not_a_file(cfg.text)}; give a UTF-8 text file or a .npy "
                             "token file")
        from ..models.gguf import check_gguf, is_gguf
        from ..models.hf import check_hf

        for m in cfg.model:  # a bad .gguf or an unloadable model is one line before the store is claimed
            if is_gguf(m):
                check_gguf(m, cfg.revision)
            else:
                check_hf(m, cfg.revision, cfg.context, cfg.text)

    def load(self, cfg, command: str, data=None):
        return None, Path(cfg.text).stem if cfg.text else "pydoc", None

    def saturation_store(self, cfg, out, name: str, sha: str | None):
        """The cross-model store (its identity names the text and the continued pretraining, not a dataset)."""
        text_name = Path(cfg.text).stem if cfg.text else "pydoc"
        ident = {"family": "hf", "data": text_name, "text": cfg.text, "revision": cfg.revision,
                 "context": cfg.context, "continue_steps": cfg.continue_steps, "continue_lr": cfg.continue_lr,
                 "batch_size": cfg.batch_size, "seed": cfg.seed, "analysis_batches": cfg.analysis_batches}
        if cfg.importance is not None:  # (absent without --importance: earlier files stay the same file)
            ident.update(importance=list(cfg.importance), bootstrap=cfg.bootstrap)
        if cfg.grow_steps:
            ident.update(grow_steps=cfg.grow_steps, grow_lr=cfg.grow_lr, grow_train=cfg.grow_train)
        return FileStore(Path(out) / f"saturation_hf_{text_name}.json", "depthaudit.saturation.v1", ident,
                         defaults=dict.fromkeys(("importance", "bootstrap", "grow_steps", "grow_lr", "grow_train")))

    def saturation_title(self, ident: dict) -> str:
        rev = f" at {ident['revision']}" if ident.get("revision") else ""
        more = f", {ident['continue_steps']} continued-pretraining steps" if ident.get("continue_steps") else ""
        return f"Depth saturation of pretrained causal LMs{rev} on {ident.get('data', '?')}{more}"

def _how(run) -> str:
    return f"grown at the start of epochs {list(run.insert_at)}" if run.arm == "grown" else "from scratch"


def _saturation_name(ident: dict) -> str | None:
    """The file a saturation store of ``ident`` is named by (:meth:`DepthFamily.saturation_store`).

    Only where the family names it from its identity alone (the default and ``resmlp``); else None (not checked).
    """
    fam = FAMILIES.get(ident["family"]) if ident.get("family") in FAMILIES else None
    if fam is None or type(fam).saturation_store is not DepthFamily.saturation_store:
        return None
    if type(fam).saturation_part is DepthFamily.saturation_part:
        part = fam.name
    elif isinstance(fam, ResMLPFamily):
        part = f"{ident['arch']}_{slug(ident['method'])}"
    else:
        return None
    return f"saturation_{part}_{ident['data']}.json"


STORE_NAME["depthaudit.saturation.v1"] = _saturation_name  # (a swapped .runs folder is named: walk 31 case 155)

