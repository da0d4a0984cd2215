"""Pretrained Hugging Face causal LMs (optional extra ``depthaudit[hf]``: transformers) for depth sufficiency.

Any causal LM whose decoder layers form one ``nn.ModuleList`` of ``config.num_hidden_layers`` layers
(GPT-NeoX/Pythia, GPT-2, Llama-style) is measured at its layer boundaries: ``h_0`` is the stream entering
layer 1 (after the embeddings), ``h_l`` the output of layer ``l`` (before the final norm for ``l = L``). These
are residual-stream states whatever the layer's inside (Pythia's parallel residual included).
"""

import json
import os
import struct
from contextlib import contextmanager

import torch
from torch import nn

from ..errors import UsageError
from .gguf import INSTALL, is_gguf, load_gguf, require_transformers  # noqa: F401  (re-exported: its home before GGUF)


def load_causal_lm(name: str, revision: str | None, device) -> tuple[nn.Module, object | None]:
    """``(model in eval mode with frozen float32 weights, tokenizer or None)``: Hub name, local folder or .gguf file."""
    model, tok, _ = load_model(name, revision, device)
    return model, tok


def check_hf(name: str, revision: str | None, context: int | None = None, text: str | None = None) -> None:
    """Refuse a ``--model`` whose configuration cannot be read before any work, so nothing is written.

    No such repo or folder, offline and not cached, no such revision, a truncated ``*.safetensors`` in a local
    folder, a ``context`` beyond the model's positions: one line. Reads its config and the weights' headers only.
    """
    tf = require_transformers()
    kw = {"revision": revision} if revision else {}
    try:
        config = tf.AutoConfig.from_pretrained(name, **kw)
    except (OSError, ValueError) as exc:
        if (os.path.isabs(name) or name.startswith((".", "~"))) and not os.path.exists(name):  # a path, not a repo id
            raise UsageError(f"--model {name}: no such folder; give a local folder with config.json and weights, "
                             "or a Hub model name") from None
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise UsageError(f"--model {name}{f' --revision {revision}' if revision else ''}: cannot load it ({first}); "
                         "give a Hub model name or a local folder with config.json and weights") from None
    if os.path.isdir(name):
        files = sorted(os.listdir(name))
        weights = [f for f in files if f.endswith((".safetensors", ".bin", ".pt", ".pth", ".h5", ".msgpack"))]
        if not weights:  # config.json alone: refused here, before the store is claimed (not when the run starts)
            raise UsageError(f"--model {name}: the folder holds no weights (*.safetensors or pytorch_model.bin), only "
                             f"{', '.join(files[:4]) or 'nothing'}; give a folder with config.json and its weights")
        for f in weights:
            if f.endswith(".safetensors"):
                check_safetensors(os.path.join(name, f), name, getattr(config, "vocab_size", None))
        tokenizer = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")
        if not (text or "").endswith(".npy") and not any(f in files for f in tokenizer):  # (refused here, before
            raise UsageError(f"--model {name} ships no tokenizer; give token ids as --text FILE.npy")  # the claim)
    check_context(config, context, name)
    vocab = getattr(config, "vocab_size", None)
    if (text or "").endswith(".npy") and os.path.isfile(text) and isinstance(vocab, int):
        import numpy as np

        try:
            top = int(np.load(text, mmap_mode="r").max(initial=0))
        except (OSError, ValueError, TypeError):
            return  # (an unreadable token file is named when it is loaded)
        if top >= vocab:
            raise UsageError(f"--text {text}: token id {top} is not below the model's vocabulary ({vocab}); give ids "
                             "made with this model's tokenizer")


def check_context(config, context: int | None, name: str) -> None:
    """Refuse a ``--context`` longer than the model's positions (one line; else an index error deep in torch)."""
    limit = next((getattr(config, k) for k in ("max_position_embeddings", "n_positions", "n_ctx")
                  if isinstance(getattr(config, k, None), int)), None)
    if context is not None and limit is not None and context > limit:
        raise UsageError(f"--context {context} exceeds the {limit} positions of --model {name}; give --context "
                         f"{limit} or less")


def check_safetensors(path: str, name: str, vocab: int | None = None) -> None:
    """A ``.safetensors`` file not whole (truncated, damaged) or not the config's (its embedding rows): one line."""
    size = os.path.getsize(path)
    try:
        with open(path, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            if 8 + n > size:
                raise ValueError("its header runs past the end of the file")
            header = json.loads(fh.read(n))
        ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"]
        need = 8 + n + max(ends, default=0)
    except (struct.error, ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        raise UsageError(f"--model {name}: {path} is not a whole safetensors file ({str(exc)[:80] or 'bad header'}); "
                         "it is damaged: copy or download it again") from None
    if size < need:
        raise UsageError(f"--model {name}: {path} is truncated ({size} of {need} bytes); copy or download it "
                         "again") from None
    embed = ("wte.weight", "embed_tokens.weight", "embed_in.weight", "word_embeddings.weight")
    for k, t in header.items():
        shape = t.get("shape") if isinstance(t, dict) else None
        if k.endswith(embed) and isinstance(vocab, int) and shape and shape[0] != vocab:
            raise UsageError(f"--model {name}: its weights do not fit its config.json ({k} has {shape[0]} rows, "
                             f"vocab_size says {vocab}); give the config the weights were saved with")


def load_model(name: str, revision: str | None, device) -> tuple[nn.Module, object | None, dict]:
    """``(model, tokenizer or None, what was loaded)``; a ``.gguf`` file is dequantized to float32 (:mod:`.gguf`)."""
    if is_gguf(name):
        if revision:
            raise UsageError(f"--revision {revision}: a .gguf file has no revisions; drop --revision")
        return load_gguf(name, device)
    tf = require_transformers()
    kw = {"revision": revision} if revision else {}
    try:
        model = tf.AutoModelForCausalLM.from_pretrained(name, dtype=torch.float32, **kw)
    except Exception as exc:  # no such repo/folder/revision, no network, not a causal LM, damaged weights
        if not isinstance(exc, OSError | ValueError) and "safetensor" not in type(exc).__module__.lower():
            raise
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise UsageError(f"--model {name}{f' --revision {revision}' if revision else ''}: cannot load it ({first}); "
                         "give a Hub model name or a local folder with config.json and weights") from None
    tok = None
    files = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")
    if not os.path.isdir(name) or any(os.path.isfile(os.path.join(name, f)) for f in files):
        try:  # (recent transformers build an empty tokenizer for a weights-only folder: not asked for there)
            tok = tf.AutoTokenizer.from_pretrained(name, **kw)
        except (OSError, ValueError, TypeError):  # no tokenizer: token ids must come from a .npy file
            tok = None
    model.eval().requires_grad_(False)
    return model.to(device), tok, {"format": "transformers"}


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder's layer list: the first ``nn.ModuleList`` of ``config.num_hidden_layers`` modules."""
    n = getattr(model.config, "num_hidden_layers", None)
    for m in model.modules():
        if isinstance(m, nn.ModuleList) and len(m) == n:
            return m
    raise UsageError(f"{type(model).__name__}: no list of {n} decoder layers found; depthaudit measures causal LMs "
                     "whose layers form one ModuleList (GPT-NeoX/Pythia, GPT-2, Llama-style)")


class HFStream(nn.Module):
    """A Hugging Face LM as ``(B, T) → (B, T, V)`` logits, or ``(logits, [h_0..h_L])`` with ``return_states``.

    The same call convention as :class:`depthaudit.models.ResidualModel`, so the training loop, evaluation and
    :func:`depthaudit.depth.growth.activation_gradients` take it unchanged.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.layers = decoder_layers(model)
        self.train(model.training)  # a fresh Module says "training": keep the LM's mode (dropout off in eval)

    def forward(self, x: torch.Tensor, return_states: bool = False):
        """Next-token logits (B, T, V); with ``return_states`` also the stream at every layer boundary."""
        if return_states:
            return stream_states(self.model, self.layers, x)
        return self.model(input_ids=x, use_cache=False).logits


def stream_states(model: nn.Module, layers: nn.ModuleList, x: torch.Tensor):
    """``(logits, [h_0, …, h_L])`` with ``h_0`` a grad-requiring leaf, so every ``h_l`` is in the loss's graph.

    Forward hooks: a pre-hook on layer 1 replaces the incoming hidden states by a detached leaf (the weights are
    frozen, so nothing before it needs a graph); a hook on every layer records its output (a tensor, or the
    first element of a tuple in older transformers).
    """
    states: list[torch.Tensor] = []

    def enter(mod, args, kwargs):
        if args:
            leaf = args[0].detach().requires_grad_()
            states.append(leaf)
            return (leaf, *args[1:]), kwargs
        leaf = kwargs["hidden_states"].detach().requires_grad_()
        states.append(leaf)
        return args, {**kwargs, "hidden_states": leaf}

    def leave(mod, args, out):
        states.append(out[0] if isinstance(out, tuple) else out)

    hooks = [layers[0].register_forward_pre_hook(enter, with_kwargs=True)]
    hooks += [layer.register_forward_hook(leave) for layer in layers]
    try:
        with torch.enable_grad():
            logits = model(input_ids=x, use_cache=False).logits
    finally:
        for h in hooks:
            h.remove()
    return logits, states


@contextmanager
def skip_layers(layers: nn.ModuleList, indices):
    """Within the block, layers ``indices`` (0-based) pass their input stream through unchanged (block removal).

    A pre-hook keeps each skipped layer's incoming hidden states and a forward hook returns them in place of its
    output (the first element of a tuple in older transformers), so the rest of the model — masks, rotary
    embeddings, per-layer attention types — is untouched. The layer still runs; its result is discarded.
    """
    hooks = []
    for i in dict.fromkeys(indices):
        box = {}

        def enter(mod, args, kwargs, box=box):
            box["h"] = args[0] if args else kwargs["hidden_states"]

        def leave(mod, args, kwargs, out, box=box):
            h = box.pop("h")
            return (h, *out[1:]) if isinstance(out, tuple) else h

        hooks += [layers[i].register_forward_pre_hook(enter, with_kwargs=True),
                  layers[i].register_forward_hook(leave, with_kwargs=True)]
    try:
        yield
    finally:
        for h in hooks:
            h.remove()
