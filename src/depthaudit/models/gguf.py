"""GGUF checkpoints (llama.cpp's single-file format) as float32 Hugging Face causal LMs.

``--model path/to/file.gguf``: transformers reads the file (``gguf_file=``), the ``gguf`` package dequantizes
every tensor (Q4_0/Q4_1/Q8_0/K-quants …) to float32, and the model is built from the config stored in the
file's metadata. Nothing is downloaded. The provenance records what was loaded: the file's sha256, its
declared quantization (``general.file_type``), the count of tensors per storage type, and the architecture.
Loading needs ``transformers``, ``gguf`` and ``accelerate`` (the ``hf`` extra); a missing piece or an
architecture transformers cannot read from GGUF is one line naming the fix.
"""

# imports inside functions: transformers is an optional extra (hf), imported where a .gguf file is read
import hashlib
import os
from collections import Counter
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch

from ..errors import UsageError

INSTALL = "pip install 'depthaudit[hf]'"


def require_transformers():
    """The ``transformers`` module, or one line naming the install."""
    try:
        import transformers
    except ImportError:
        raise UsageError(f"--family hf needs the transformers package: {INSTALL}") from None
    return transformers


def is_gguf(name: str) -> bool:
    """Whether ``name`` names a GGUF file (by extension: a Hub name never ends in .gguf)."""
    return str(name).lower().endswith(".gguf")


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """The file's sha256, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _require(module: str, what: str):
    try:
        return __import__(module)
    except ImportError:
        raise UsageError(f"loading a .gguf file needs the {what} package: {INSTALL} (or pip install {what})") from None


def gguf_metadata(path: str | os.PathLike) -> dict:
    """What the file declares: architecture, name, quantization (file type) and tensor counts per storage type."""
    gguf = _require("gguf", "gguf")
    try:
        reader = gguf.GGUFReader(str(path))
    except (ValueError, OSError, AssertionError) as exc:  # bad magic, truncated, unreadable
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise UsageError(f"--model {path}: not a readable GGUF file ({first}); give a llama.cpp .gguf file") from None

    def field(key):
        f = reader.fields.get(key)
        if f is None:
            return None
        v = f.contents()
        return v

    ftype = field("general.file_type")
    try:
        quant = gguf.LlamaFileType(int(ftype)).name if ftype is not None else None
    except ValueError:
        quant = f"file_type {ftype}"
    tensors = Counter(t.tensor_type.name for t in reader.tensors)
    return {"format": "gguf", "architecture": field("general.architecture"), "gguf_name": field("general.name"),
            "quantization": quant, "file_type": None if ftype is None else int(ftype),
            "quantization_version": field("general.quantization_version"),
            "tensor_types": dict(sorted(tensors.items())), "tensors": sum(tensors.values()),
            "has_tokenizer": "tokenizer.ggml.tokens" in reader.fields}


def check_gguf(path: str, revision: str | None = None) -> None:
    """Refuse a bad .gguf ``--model`` before any work, so nothing is written.

    A revision, a missing or unreadable file, an architecture transformers cannot build from GGUF;
    :func:`load_gguf` checks the same again when it loads.
    """
    if revision:
        raise UsageError(f"--revision {revision}: a .gguf file has no revisions; drop --revision")
    if not Path(path).is_file():
        raise UsageError(f"--model {path}: no such .gguf file; give the path of a llama.cpp GGUF checkpoint")
    tf = require_transformers()
    arch = gguf_metadata(path)["architecture"]
    try:
        from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES as known
    except ImportError:  # another transformers layout: loading will say it
        return
    if arch not in known:
        raise UsageError(f"--model {path}: transformers {tf.__version__} cannot build a causal LM from this {arch!r} "
                         f"GGUF (it reads {', '.join(a for a in known if a not in ('general', 'tokenizer'))}); "
                         "convert the checkpoint to a Hugging Face folder (config.json + weights) and give that folder")


def load_gguf(path: str, device) -> tuple[torch.nn.Module, object | None, dict]:
    """``(model in eval mode with frozen float32 weights, tokenizer or None, provenance)`` from a .gguf file."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"--model {path}: no such .gguf file; give the path of a llama.cpp GGUF checkpoint")
    tf = require_transformers()
    meta = gguf_metadata(p)  # also checks that gguf is installed and the file is GGUF
    _require("accelerate", "accelerate")
    try:
        model = tf.AutoModelForCausalLM.from_pretrained(str(p.parent), gguf_file=p.name, dtype=torch.float32)
    except (OSError, ValueError, KeyError, TypeError, NotImplementedError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise UsageError(f"--model {path}: transformers {tf.__version__} cannot build a causal LM from this "
                         f"{meta['architecture']!r} GGUF ({first}); upgrade transformers or convert the checkpoint "
                         "to a Hugging Face folder (config.json + weights) and give that folder") from None
    tok = None
    if meta["has_tokenizer"]:
        try:
            tok = tf.AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name)
        except (OSError, ValueError, KeyError, TypeError, NotImplementedError):
            tok = None  # token ids must then come from a .npy file
    dtypes = sorted({str(t.dtype).removeprefix("torch.") for t in model.parameters()})
    meta.update(sha256=sha256_file(p), file=str(p.resolve()), bytes=p.stat().st_size, loaded_dtype=dtypes,
                transformers=tf.__version__, gguf_package=_version("gguf"))
    model.eval().requires_grad_(False)
    return model.to(device), tok, meta


def _version(dist: str) -> str | None:
    try:
        return version(dist)
    except PackageNotFoundError:
        return None
