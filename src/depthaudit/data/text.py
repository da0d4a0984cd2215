"""Text for the decoder: any local UTF-8 text (characters) or token file (.npy of ints), or the embedded default.

The embedded default needs no download: the English help text that ships with CPython itself
(``pydoc_data.topics``, ~0.7 MB), read as characters. The first 90 % of the tokens are the training
split, the rest the test split; each split is cut into non-overlapping windows of ``context + 1`` tokens
(input = the first ``context``, target = the next-token shift). With ``bos`` (a model whose tokenizer starts every
sequence with a beginning-of-sequence token, e.g. Gemma) each window is instead ``context`` text tokens, the input
is ``[bos]`` followed by the first ``context − 1`` of them and the targets are all ``context``: every window is a
sequence as the model saw them in training.
"""

import hashlib
from dataclasses import dataclass
from pathlib import Path
from pydoc_data import topics

import numpy as np
import torch

from ..errors import UsageError
from ..io import why_not_a_file
from .base import regular_file

MAX_VOCAB = 2**20  # token ids above this would make an absurd embedding (the largest LM vocabularies are ~256k)


@dataclass(frozen=True)
class TextData:
    """Windows on the device: x (N, T) inputs, y (N, T) next tokens; vocabulary size; provenance."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    vocab: int
    source: str
    sha256: str
    bos: int | None = None

    def provenance(self) -> dict:
        """What a result file records about the data."""
        return {"name": "text", "source": self.source, "sha256": self.sha256, "vocab": self.vocab,
                "n_train": int(self.x_train.shape[0]), "n_test": int(self.x_test.shape[0]),
                "context": int(self.x_train.shape[1]), "bos_per_window": self.bos}


def _default_text() -> tuple[str, str]:
    return "\n\n".join(topics.topics[k] for k in sorted(topics.topics)), "python stdlib pydoc_data.topics"


def load_text(path: str | None, context: int, device, tokens: np.ndarray | None = None,
              vocab: int | None = None, bos: int | None = None) -> TextData:
    """Tokens from ``path`` (or the embedded default), windowed for next-token prediction.

    ``tokens``: ids already made from that text by a model's tokenizer (the provenance still hashes the file);
    ``vocab``: the model's vocabulary size, which every id must be below; ``bos``: start every window with this id.
    """
    if tokens is not None:
        raw = regular_file(path).read_bytes() if path is not None else _default_text()[0].encode()
        source = str(Path(path).resolve()) if path is not None else _default_text()[1]
    elif path is None:
        text, source = _default_text()
        raw = text.encode()
        lut = {c: i for i, c in enumerate(sorted(set(text)))}
        tokens = np.fromiter((lut[c] for c in text), dtype=np.int64, count=len(text))
    else:
        p = Path(path)
        if not p.is_file():
            raise UsageError(f"--text {path}: {why_not_a_file(path)}; give a UTF-8 text file or a .npy token file")
        raw = regular_file(p).read_bytes()
        source = str(p.resolve())
        if p.suffix == ".npy":
            try:
                arr = np.load(p, allow_pickle=False)
            except (ValueError, OSError, EOFError) as exc:
                raise UsageError(f"--text {path}: not a numeric .npy token array ({exc}); save tokens with "
                                 "np.save(path, np.asarray(ids, dtype=np.int64))") from None
            if not np.issubdtype(arr.dtype, np.integer):
                raise UsageError(f"--text {path}: token ids must be integers, the array holds {arr.dtype}")
            if arr.ndim != 1:
                raise UsageError(f"--text {path}: token ids must be one 1-D sequence, the array is {arr.ndim}-D "
                                 f"{tuple(arr.shape)}; save np.asarray(ids).ravel() if that is the token order")
            tokens = arr.astype(np.int64).ravel()
            if tokens.size and tokens.min() < 0:
                raise UsageError(f"--text {path}: token ids must be >= 0")
        else:
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise UsageError(f"--text {path}: not UTF-8 ({exc}); give UTF-8 text or a .npy token file") from None
            lut = {c: i for i, c in enumerate(sorted(set(text)))}
            tokens = np.fromiter((lut[c] for c in text), dtype=np.int64, count=len(text))
    if vocab is not None and tokens.size and tokens.max() >= vocab:
        raise UsageError(f"--text {path}: token id {int(tokens.max())} is not below the model's vocabulary ({vocab}); "
                         "give ids made with this model's tokenizer")
    if vocab is None and tokens.size and tokens.max() >= MAX_VOCAB:
        raise UsageError(f"--text {path}: token id {int(tokens.max())} would make a {int(tokens.max()) + 1:,}-row "
                         f"embedding (over {MAX_VOCAB:,}); renumber the ids to 0..V-1")
    if tokens.size < 2:
        raise UsageError(f"--text {path}: holds {tokens.size} tokens; give a text long enough for --context")
    vocab = vocab if vocab is not None else int(tokens.max()) + 1
    split = int(0.9 * len(tokens))

    def windows(t):
        span = context if bos is not None else context + 1
        n = (len(t) - 1) // span if bos is None else len(t) // span
        if n < 1:
            raise UsageError(f"--text {path}: a split of it holds {len(t)} tokens, too few for --context {context} "
                             f"(a window needs {span + (1 if bos is None else 0)}); give a longer text or a smaller "
                             "--context")  # (walk 18 case 152: named neither the text nor a fix)
        w = torch.from_numpy(t[: n * span].reshape(n, span).copy())
        if bos is not None:  # [bos, t_1 … t_{T-1}] → [t_1 … t_T]
            return torch.cat([torch.full((n, 1), bos, dtype=w.dtype), w[:, :-1]], 1).to(device), w.to(device)
        return w[:, :-1].to(device), w[:, 1:].to(device)

    (xtr, ytr), (xte, yte) = windows(tokens[:split]), windows(tokens[split:])
    return TextData(xtr, ytr, xte, yte, vocab, source, hashlib.sha256(raw).hexdigest(), bos)
