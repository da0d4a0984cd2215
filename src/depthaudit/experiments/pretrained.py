"""``depthaudit saturation --family hf``: AG, AGmax and V at every layer boundary of pretrained causal LMs.

Per model (one sweep cell each, resumable): load it (Hub name or local folder, ``--revision``), optionally
continue pretraining for ``continue_steps`` AdamW steps on the text's training split through the one loop
(:func:`depthaudit.loop.fit`), freeze it, then measure on **held-out** windows (the text's test split, never
trained on): AG_l, the per-example maxima, AGmax, and V_l for an MLP-family insertion — a zero-output pre-LN
MLP block ``h + fc2(GELU(fc1(LN(h))))`` of expansion ``mlp_ratio`` with ``fc2 = 0``, whose tangent features are
``[ψ(h), 1]`` (drawn per position from the run's seed). The held-out next-token loss is reported beside them.

``--model`` also takes a ``.gguf`` file (dequantized to float32; :mod:`depthaudit.models.gguf`). With
``importance`` (``--importance [N …]``) the same held-out windows also give, from the same forward + backward,
Block Influence, the angular distance ℓ→ℓ+n and a first-order removal estimate, and then the measured loss
increase of every single-block removal and of each n-block set a rule would prune
(:mod:`depthaudit.depth.importance`). With ``grow_steps`` the candidate block of the highest-V and of the
lowest-V boundary is inserted and trained against the model without insertion (:mod:`.lm_grow`).
"""

import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..data.base import sha256_file, sha256_files
from ..data.text import _default_text, load_text
from ..depth.growth import activation_gradients, separated_test
from ..depth.importance import StreamScores, depth_importance
from ..depth.insert import block_features
from ..errors import UsageError
from ..loop import evaluate, fit, plain_step
from ..models.gpt import lm_loss
from ..models.hf import HFStream, check_context, load_model
from ..provenance import provenance
from ..seeds import derive_seed
from .cell import Cell
from .lm_grow import candidate_block, grow_arms


@dataclass(frozen=True, kw_only=True)
class PretrainedRun(Cell):
    """One pretrained model of the cross-model sweep: its :class:`SaturationConfig` (``--family hf``) and ``model``."""

    model: str
    mlp_ratio: int = 4  # the candidate block's expansion (a GPT MLP's)
    # what was measured, by content: a local model (folder or .gguf) and the --text file, so a result is reused
    # only for the same weights and text (None: a Hub name, named by its --revision; the bundled default text)
    model_sha256: str | None = None
    text_sha256: str | None = None
    KEYS = ("model", "revision", "text", "context", "continue_steps", "continue_lr", "batch_size", "analysis_batches",
            "low_signal", "mlp_ratio", "seed", "device", "importance", "bootstrap", "grow_steps", "grow_lr",
            "grow_train", "model_sha256", "text_sha256")

    @classmethod
    def of(cls, config, model: str) -> "PretrainedRun":
        """The cell of ``model`` in the sweep ``config``, with the content digests of its local files."""
        return cls(config=config, model=model, model_sha256=content_sha256(model),
                   text_sha256=content_sha256(config.text))

    epoch_budget = False  # a pretrained model is measured (continued only by --continue-steps): no epochs

    def describe(self) -> str:
        """One line for listings and the run's announcement: the model and what is done to it."""
        rev = f"@{self.revision}" if self.revision else ""
        more = (f", continued {self.continue_steps} AdamW steps, then measured" if self.continue_steps
                else ", measured as loaded (nothing trained)")
        extra = (", depth importance" if self.importance is not None else "") + (
            f", growth {self.grow_steps} steps" if self.grow_steps else "")
        return f"{self.model}{rev}{more}{extra}"

    def same_as(self, stored: dict) -> bool:
        """Equality with a stored config (fields added later: what that version ran)."""
        mine = self.to_dict()
        mine["importance"] = list(self.importance) if self.importance is not None else None
        # (a record from before the digests has none: it is measured again, never assumed to be these files')
        return {"importance": None, "bootstrap": 1000, "grow_steps": 0, "grow_lr": 1e-3, "grow_train": "all",
                "model_sha256": None, "text_sha256": None, **stored} == mine


def content_sha256(path: str | None) -> str | None:
    """sha256 of a local file, or over a local folder's files (names and contents); None for anything else.

    A Hub name is not a local path (its ``--revision`` names it); an unreadable file is left to the loader,
    which names it in one line.
    """
    if path is None or not os.path.exists(path):
        return None
    p = Path(path)
    try:
        if p.is_dir():
            files = [f for f in p.rglob("*") if f.is_file() and ".cache" not in f.relative_to(p).parts]
            return sha256_files(files, p)
        return sha256_file(p) if p.is_file() else None
    except OSError:
        return None


def tokens_for(text: str | None, tokenizer, vocab: int, model: str) -> tuple[np.ndarray | None, str]:
    """``(token ids, source)`` of the text with the model's tokenizer (None ids: a .npy file is read as is)."""
    if text is not None and text.endswith(".npy"):
        return None, text
    if tokenizer is None:
        raise UsageError(f"--model {model} ships no tokenizer; give token ids as --text FILE.npy")
    if text is None:
        raw, source = _default_text()
    else:
        try:
            with open(text, encoding="utf-8") as f:
                raw = f.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--text {text}: cannot read it as UTF-8 ({exc})") from None
        source = text
    ids = np.asarray(tokenizer(raw)["input_ids"], dtype=np.int64)
    bos = window_bos(tokenizer)
    if bos is not None and ids.size and ids[0] == bos:  # the one BOS of the whole text: each window gets its own
        ids = ids[1:]
    return ids, source


def window_bos(tokenizer) -> int | None:
    """The beginning-of-sequence id the tokenizer puts before every sequence (Gemma, Llama 2), or None (GPT-2, SmolLM2).

    Such a model has only seen sequences that start with it, and without it its loss is far higher (Gemma 3 270M on
    the held-out text: 6.76 nats/token without, 3.21 with), so every window starts with it (:func:`load_text`).
    """
    if tokenizer is None:
        return None
    bos = getattr(tokenizer, "bos_token_id", None)
    try:
        first = tokenizer("a")["input_ids"][:1]
    except (TypeError, ValueError, KeyError):
        return None
    return int(bos) if bos is not None and first == [bos] else None


def candidate_features(d: int, ratio: int, seed: int, device):
    """``feature_fn(l, h)``: ``[ψ(h), 1]`` of a zero-output pre-LN MLP block drawn from ``seed`` for position l."""
    blocks = {}

    def feature_fn(pos, h):
        if pos not in blocks:
            blocks[pos] = candidate_block(d, ratio, seed, pos).to(device=h.device, dtype=h.dtype).eval()
        return block_features(blocks[pos], h)

    return feature_fn


def run_pretrained(spec, data=None, log=None, argv=None) -> dict:
    """Sweep runner for one model: load, (continue), measure on held-out windows, return the record."""
    cfg: PretrainedRun = spec.cfg
    device = torch.device(cfg.device)
    t0 = time.perf_counter()
    log = log or (lambda m: None)
    hf, tok, source = load_model(cfg.model, cfg.revision, device)

    check_context(hf.config, cfg.context, cfg.model)  # (a .gguf's positions are known only now)
    timing = {"load_s": round(time.perf_counter() - t0, 3)}
    vocab = int(hf.config.vocab_size)
    ids, _ = tokens_for(cfg.text, tok, vocab, cfg.model)
    data = load_text(cfg.text, cfg.context, device, tokens=ids, vocab=vocab,
                     bos=window_bos(tok) if ids is not None else None)
    model = HFStream(hf)
    hist, status = [], "ok"
    if cfg.continue_steps:  # continued pretraining: N steps = one epoch over N·B windows, cosine to 0
        torch.manual_seed(derive_seed(cfg.seed, "continue") % 2**31)
        n = cfg.continue_steps * cfg.batch_size
        gen = torch.Generator().manual_seed(derive_seed(cfg.seed, "continue-windows"))
        reps = -(-n // data.x_train.shape[0])
        idx = torch.cat([torch.randperm(data.x_train.shape[0], generator=gen) for _ in range(reps)])[:n].to(device)
        sub = type("Windows", (), {"x_train": data.x_train[idx], "y_train": data.y_train[idx]})
        model.requires_grad_(True).train()
        opt = torch.optim.AdamW(hf.parameters(), lr=cfg.continue_lr, weight_decay=0.0)
        hist, status = fit(n, cfg.batch_size, 1, cfg.continue_lr, cfg.seed, device,
                           plain_step(model, opt, sub, lm_loss), lambda: evaluate(model, *_held_out(data, cfg), 8,
                                                                                   lm_loss), log=log)
        model.requires_grad_(False).eval()
        timing["continue_s"] = round(time.perf_counter() - t0 - timing["load_s"], 3)
    x_te, y_te = _held_out(data, cfg)
    bs = cfg.batch_size
    batches = [(x_te[i:i + bs], y_te[i:i + bs]) for i in range(0, x_te.shape[0], bs)]  # held-out windows
    rec = {"schema": "depthaudit.pretrained_run.v1", "status": status, "config": cfg.to_dict(), "tracking": None,
           "provenance": provenance(device, data.provenance(), cfg.seed, argv)
           | {"model": _model_provenance(hf) | source},
           "blocks": len(model.layers), "params": sum(p.numel() for p in hf.parameters()), "history": hist}
    if status == "diverged":
        rec.update(signal=None, final={"test_loss": None, "test_acc": None})
        return rec
    log(f"  {cfg.model}: held-out loss over {x_te.shape[0]} windows of {x_te.shape[1]} tokens")
    loss, acc = evaluate(model, x_te, y_te, cfg.batch_size, lm_loss)
    d = int(hf.config.hidden_size)
    log(f"  {cfg.model}: AG and V at the {len(model.layers) + 1} boundaries over {len(batches)} batches "
        f"(loss {loss:.4f})")
    t1 = time.perf_counter()
    scores = None
    if cfg.importance is not None:
        scores = StreamScores((1, *cfg.importance))
    sig = activation_gradients(model, batches, feature_fn=candidate_features(d, cfg.mlp_ratio, cfg.seed, device),
                               loss_fn=lm_loss, observe=scores)
    timing["signal_s"] = round(time.perf_counter() - t1, 3)
    sig["low_signal"] = sig["AGmax"] < cfg.low_signal
    sig["split"] = f"held-out (test split), {len(batches)} batches of {cfg.batch_size} windows"
    sig["test"] = separated_test(sig, cfg.low_signal, None, int(x_te.shape[0]))
    sig["positions_per_batch"] = int(batches[0][0].numel())
    sig["candidate_features"] = cfg.mlp_ratio * d + 1
    if scores is not None:
        t1 = time.perf_counter()
        log(f"  {cfg.model}: depth importance: one forward pass over the windows per removal (AG took "
            f"{timing['signal_s']:.0f} s)")
        rec["importance"] = depth_importance(model, model.layers, batches, scores, sig, (1, *cfg.importance),
                                             cfg.bootstrap, derive_seed(cfg.seed, "bootstrap") % 2**31, log)
        timing["importance_s"] = round(time.perf_counter() - t1, 3)
    if cfg.grow_steps:
        t1 = time.perf_counter()
        rec["grow"] = grow_arms(model, hf, data, cfg, sig, x_te, y_te, log)
        timing["grow_s"] = round(time.perf_counter() - t1, 3)
    rec.update(signal=sig, final={"test_loss": loss, "test_acc": acc},
               timing=timing | {"seconds": round(time.perf_counter() - t0, 3)})
    return rec


def _held_out(data, cfg: PretrainedRun):
    """The analysis windows: the first ``analysis_batches × batch_size`` windows of the test split."""
    n = min(data.x_test.shape[0], cfg.analysis_batches * cfg.batch_size)
    return data.x_test[:n], data.y_test[:n]


def _model_provenance(hf) -> dict:
    """What was loaded: class, Hub name or path, commit hash when the Hub gave one."""
    c = hf.config
    return {"class": type(hf).__name__, "name_or_path": getattr(c, "_name_or_path", None),
            "commit": getattr(c, "_commit_hash", None), "layers": c.num_hidden_layers, "hidden": c.hidden_size}
