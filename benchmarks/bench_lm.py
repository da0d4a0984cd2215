"""Where a pretrained LM's depth measurement spends its time: tokens/s of each part against the model's own step.

    python benchmarks/bench_lm.py --model SmolLM2-135M-Instruct.Q4_1.gguf --batch-size 8 --context 64 --repeats 2
    python benchmarks/bench_lm.py            # a small random Llama (no file needed)

Per batch of ``batch × context`` held-out tokens, interleaved over ``--repeats`` rounds in one process, minimum
per part:

* ``forward`` — the model's own forward, no grad (what every removal pass costs);
* ``forward+backward`` — the model's own training step cost: loss.backward() into every weight;
* ``AG pass`` — :func:`activation_gradients` without V: forward with the stream states, backward to the states only
  (weights frozen), the scores of :class:`StreamScores` observed from the same pass;
* ``AG pass, no observer`` — the same without the importance scores (their overhead is the difference);
* ``V (all boundaries)`` — the growth value's SVD projections alone, given the states and gradients;
* ``removal pass`` — a forward with one block skipped (``--importance`` costs 1 + L + (rule sets) of these).
"""

import argparse
import time

import torch


def tiny_model():
    import transformers

    cfg = transformers.LlamaConfig(hidden_size=192, num_hidden_layers=6, num_attention_heads=3, num_key_value_heads=1,
                                   intermediate_size=512, vocab_size=8192, max_position_embeddings=256)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).eval().requires_grad_(False), "random Llama d=192 L=6 V=8192"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None, help=".gguf file, local folder or Hub name (default: a random Llama)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threads", type=int, default=None)
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    from depthaudit.depth.growth import activation_gradients, growth_value
    from depthaudit.depth.importance import StreamScores
    from depthaudit.experiments.pretrained import candidate_features
    from depthaudit.models.gpt import lm_loss
    from depthaudit.models.hf import HFStream, load_model, skip_layers

    if a.model:
        hf, _, src = load_model(a.model, None, "cpu")
        name = f"{a.model} ({src.get('quantization', src['format'])})"
    else:
        hf, name = tiny_model()
    model = HFStream(hf)
    vocab, d = int(hf.config.vocab_size), int(hf.config.hidden_size)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, vocab, (a.batch_size, a.context), generator=g)
    y = torch.randint(0, vocab, (a.batch_size, a.context), generator=g)
    feats = candidate_features(d, 4, 42, "cpu")
    grabbed = {}

    def grab(x_, y_, logits, states, qs):
        grabbed.update(states=states, qs=qs)

    def forward():
        with torch.no_grad():
            model(x)

    def train_step():
        hf.requires_grad_(True)
        hf.zero_grad(set_to_none=True)
        lm_loss(model(x), y).backward()
        hf.zero_grad(set_to_none=True)
        hf.requires_grad_(False)

    def ag_pass():
        activation_gradients(model, [(x, y)], loss_fn=lm_loss, observe=StreamScores((1, 2, 4, 8)))

    def ag_plain():
        activation_gradients(model, [(x, y)], loss_fn=lm_loss, observe=grab)

    def v_only():
        for i, (h, q) in enumerate(zip(grabbed["states"], grabbed["qs"], strict=True)):
            growth_value(feats(i, h), q.reshape(-1, q.shape[-1]))

    def removal():
        with skip_layers(model.layers, [len(model.layers) // 2]), torch.no_grad():
            model(x)

    parts = {"forward": forward, "forward+backward (model's own)": train_step, "AG pass + importance scores": ag_pass,
             "AG pass, no observer": ag_plain, "V (all boundaries)": v_only, "removal pass (1 block skipped)": removal}
    ag_plain()  # warm-up, and the states V needs
    times = {k: [] for k in parts}
    for _ in range(a.repeats):
        for k, f in parts.items():
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
    tokens = a.batch_size * a.context
    ref = min(times["forward+backward (model's own)"])
    print(f"{name}: {len(model.layers)} layers, d={d}, batch {a.batch_size} x {a.context} = {tokens} tokens, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads, min of {a.repeats}")
    print("| part | seconds per batch | tokens/s | × model's forward+backward |\n|---|---|---|---|")
    for k, v in times.items():
        t = min(v)
        print(f"| {k} | {t:.3f} | {tokens / t:,.0f} | {t / ref:.2f} |")


if __name__ == "__main__":
    main()
