r"""Save two tiny random causal LMs (GPT-NeoX as in Pythia, and GPT-2) and a token file, for an offline try.

    python examples/tiny_hf.py --out tiny_hf
    depthaudit saturation --family hf --model tiny_hf/gpt-neox tiny_hf/gpt2 --text tiny_hf/tokens.npy \\
        --context 32 --continue-steps 20 --out results/sat_hf_tiny

Online, the same command takes Hub names instead (e.g. ``EleutherAI/pythia-70m-deduped --revision step143000``).
"""

import argparse
from pathlib import Path

import numpy as np
import torch
import transformers


def main() -> None:
    """Write ``OUT/gpt-neox``, ``OUT/gpt2`` (weights + config, no tokenizer) and ``OUT/tokens.npy``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tiny_hf")
    a = ap.parse_args()
    out = Path(a.out)
    vocab = 256  # the text's bytes are the tokens
    configs = {
        "gpt-neox": transformers.GPTNeoXConfig(hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                                               intermediate_size=256, vocab_size=vocab, max_position_embeddings=128,
                                               use_parallel_residual=True),  # Pythia's layout
        "gpt2": transformers.GPT2Config(n_embd=64, n_layer=4, n_head=4, vocab_size=vocab, n_positions=128,
                                        bos_token_id=0, eos_token_id=0),
    }
    for name, cfg in configs.items():
        torch.manual_seed(0)
        transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(out / name)
    from pydoc_data import topics  # CPython's own help text: no download

    text = "\n\n".join(topics.topics[k] for k in sorted(topics.topics)).encode()
    np.save(out / "tokens.npy", np.frombuffer(text, dtype=np.uint8).astype(np.int64))
    print(f"wrote {out}/gpt-neox, {out}/gpt2 and {out}/tokens.npy ({len(text):,} tokens)")


if __name__ == "__main__":
    main()
