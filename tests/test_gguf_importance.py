"""GGUF loading and the depth-importance scores: laws on tiny Llama-style models built here (no download).

* A tiny random Llama is written to a GGUF file by the ``gguf`` package in llama.cpp's convention (tensor names from
  gguf's own name map, the q/k rows permuted as llama.cpp's converter does); ``--model file.gguf`` loads it back
  with the logits of the model it came from, bit for bit with F32 tensors; with Q8_0 tensors every weight equals
  ``gguf.quants.dequantize(quantize(w))`` exactly.
* A zero-output block (o_proj = down_proj = 0) inserted into the model: skipping it changes no output bit, its
  Block Influence and measured Δloss are 0; the angular distance of a stream to itself is 0; Spearman of a score
  with itself is 1 and agrees with scipy's.
"""

import json

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")
pytest.importorskip("accelerate")

from depthaudit.cli import main  # noqa: E402
from depthaudit.depth.growth import activation_gradients  # noqa: E402
from depthaudit.depth.importance import (  # noqa: E402
    StreamScores,
    angular,
    angular_rule,
    cosine,
    depth_importance,
    rankdata,
    spearman,
)
from depthaudit.models.gpt import lm_loss  # noqa: E402
from depthaudit.models.hf import HFStream, load_model, skip_layers  # noqa: E402

VOCAB, LAYERS, HEADS, KV_HEADS, D = 101, 4, 4, 2, 32


def tiny_llama(seed=0):
    cfg = transformers.LlamaConfig(hidden_size=D, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                                   num_key_value_heads=KV_HEADS, intermediate_size=64, vocab_size=VOCAB,
                                   max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=10000.0,
                                   tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # norms away from 1, so a mis-mapped norm would show
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    return model


def llama_cpp_permute(w: np.ndarray, n_head: int, n_head_kv: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf.py's ``LlamaModel.permute`` of the q/k projection rows."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(model, path, qtype=None):
    """The model as a llama.cpp GGUF: metadata, then every tensor (2-D ones as ``qtype`` if given, else F32)."""
    c = model.config
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny llama")
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_rope_dimension_count(c.hidden_size // c.num_attention_heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_vocab_size(c.vocab_size)
    w.add_file_type(gguf.LlamaFileType.ALL_F32 if qtype is None else gguf.LlamaFileType.MOSTLY_Q8_0)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, c.num_hidden_layers)
    stored = {}
    for hf_name, t in model.state_dict().items():
        arr = t.detach().numpy().astype(np.float32)
        if "q_proj" in hf_name:
            arr = llama_cpp_permute(arr, c.num_attention_heads, c.num_attention_heads)
        elif "k_proj" in hf_name:
            arr = llama_cpp_permute(arr, c.num_attention_heads, c.num_key_value_heads)
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        assert name is not None, hf_name
        if qtype is not None and arr.ndim == 2:
            q = gguf.quants.quantize(arr, qtype)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)
            stored[hf_name] = (arr, q)
        else:
            w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return stored


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf")
    model = tiny_llama()
    write_gguf(model, root / "tiny-f32.gguf")
    model.save_pretrained(root / "folder")
    np.save(root / "tokens.npy", np.random.default_rng(0).integers(0, VOCAB, 4000).astype(np.int64))
    return root, model


def test_f32_gguf_loads_back_with_the_same_logits_bit_for_bit(files):
    root, ref = files
    model, tok, meta = load_model(str(root / "tiny-f32.gguf"), None, "cpu")
    assert tok is None and type(model).__name__ == "LlamaForCausalLM"
    x = torch.randint(0, VOCAB, (3, 17), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        a, b = model(input_ids=x).logits, ref(input_ids=x).logits
    diff = (a - b).abs().max().item()
    wdiff = max((p - q).abs().max().item() for p, q in zip(model.state_dict().values(),
                                                           ref.state_dict().values(), strict=True))
    print(f"F32 GGUF: max |logit diff| {diff:.3e}, max |weight diff| {wdiff:.3e}; provenance {meta}")
    assert torch.equal(a, b) and wdiff == 0
    assert meta["quantization"] == "ALL_F32" and meta["tensor_types"] == {"F32": len(ref.state_dict())}
    import hashlib

    assert meta["sha256"] == hashlib.sha256((root / "tiny-f32.gguf").read_bytes()).hexdigest()
    assert meta["loaded_dtype"] == ["float32"] and meta["architecture"] == "llama"


def test_q8_gguf_dequantizes_to_the_packages_own_dequantization(files, tmp_path):
    _, ref = files
    stored = write_gguf(ref, tmp_path / "tiny-q8.gguf", gguf.GGMLQuantizationType.Q8_0)
    model, _, meta = load_model(str(tmp_path / "tiny-q8.gguf"), None, "cpu")
    sd = model.state_dict()
    c = ref.config
    worst, err = 0.0, 0.0
    for name, (arr, q) in stored.items():
        deq = gguf.quants.dequantize(q, gguf.GGMLQuantizationType.Q8_0)
        got = sd[name].numpy()
        if "q_proj" in name or "k_proj" in name:  # what the loader undoes: the inverse permutation
            kv = c.num_attention_heads if "q_proj" in name else c.num_key_value_heads
            got = llama_cpp_permute(got, c.num_attention_heads, kv)
        worst = max(worst, float(np.abs(got - deq).max()))
        err = max(err, float(np.abs(got - arr).max() / np.abs(arr).max()))
    print(f"Q8_0: max |loaded − gguf.dequantize| {worst:.3e}; max relative quantization error {err:.3e}; {meta}")
    assert worst == 0.0 and 0 < err < 1e-2
    assert meta["quantization"] == "MOSTLY_Q8_0" and meta["tensor_types"]["Q8_0"] == len(stored)


def test_bad_gguf_inputs_are_one_line(files, tmp_path, capsys, monkeypatch):
    root, _ = files
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all" * 10)
    w = gguf.GGUFWriter(str(tmp_path / "mamba.gguf"), "rwkv6")  # an architecture transformers cannot build
    w.add_name("x")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((4, 4), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    cases = [([str(tmp_path / "none.gguf")], "no such .gguf file"), ([str(junk)], "not a readable GGUF file"),
             ([str(tmp_path / "mamba.gguf")], "cannot build a causal LM from this 'rwkv6' GGUF"),
             ([str(root / "tiny-f32.gguf"), "--revision", "main"], "a .gguf file has no revisions")]
    for extra, want in cases:
        assert main(["saturation", "--family", "hf", "--model", *extra, "--out", str(tmp_path / "o")]) == 2
        err = [ln for ln in capsys.readouterr().err.strip().splitlines() if ln.startswith("depthaudit")]
        print(extra, "→", err)
        assert len(err) == 1 and want in err[0]
    monkeypatch.setitem(__import__("sys").modules, "gguf", None)  # the extra only partly installed
    assert main(["saturation", "--family", "hf", "--model", str(root / "tiny-f32.gguf"), "--out",
                 str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert "needs the gguf package" in err and "pip install 'depthaudit[hf]'" in err


def with_zero_block(model, at: int):
    """A copy of ``model`` with a zero-output decoder layer inserted before layer ``at`` (o_proj = down_proj = 0)."""
    import copy

    grown = copy.deepcopy(model)
    new = copy.deepcopy(grown.model.layers[at])
    with torch.no_grad():
        new.self_attn.o_proj.weight.zero_()
        new.mlp.down_proj.weight.zero_()
    layers = list(grown.model.layers)
    layers.insert(at, new)
    grown.model.layers = torch.nn.ModuleList(layers)
    for i, layer in enumerate(grown.model.layers):
        layer.self_attn.layer_idx = i
    grown.config.num_hidden_layers = len(layers)
    grown.config.layer_types = ["full_attention"] * len(layers) if getattr(grown.config, "layer_types", None) else None
    return grown.eval().requires_grad_(False)


def test_skipping_a_zero_output_block_changes_no_bit_bi_and_delta_loss_are_zero(files):
    _, ref = files
    at = 2
    grown = with_zero_block(ref, at)
    stream = HFStream(grown)
    g = torch.Generator().manual_seed(3)
    batches = [(torch.randint(0, VOCAB, (4, 16), generator=g), torch.randint(0, VOCAB, (4, 16), generator=g))
               for _ in range(3)]
    x = batches[0][0]
    with torch.no_grad():
        full = stream(x)
        with skip_layers(stream.layers, [at]):
            skipped = stream(x)
        with skip_layers(stream.layers, [1]):  # a real block: skipping it does change the output
            other = stream(x)
        plain = ref(input_ids=x).logits
    print(f"zero block skipped: max |Δlogit| {(full - skipped).abs().max().item():.1e}; intact vs model without it "
          f"{(full - plain).abs().max().item():.1e}; real block skipped {(full - other).abs().max().item():.2e}")
    assert torch.equal(full, skipped) and torch.equal(full, plain) and not torch.equal(full, other)
    scores = StreamScores((1, 2))
    sig = activation_gradients(stream, batches, loss_fn=lm_loss, observe=scores)
    imp = depth_importance(stream, stream.layers, batches, scores, sig, ns=(1, 2), reps=50, seed=0)
    pb = imp["per_block"]
    print("BI", pb["BI"], "\nΔloss", pb["delta_loss"], "\nangular_1", pb["angular_1"])
    assert pb["BI"][at] == 0.0 and pb["delta_loss"][at] == 0.0 and pb["angular_1"][at] == 0.0
    assert pb["first_order"][at] == 0.0
    assert all(v > 0 for i, v in enumerate(pb["BI"]) if i != at)
    assert pb["delta_loss"][1] != 0.0
    # the zero block is what every rule prunes first at n = 1; the measured loss of that removal is exactly 0
    rows = {r["rule"]: r for r in imp["pruning"]["1"]}
    assert rows["BI lowest (ShortGPT)"]["blocks"] == [at + 1] and rows["BI lowest (ShortGPT)"]["delta_loss"] == 0.0
    assert rows["angular (Gromov)"]["blocks"] == [at + 1]
    assert imp["spearman"]["BI"]["spearman"] == pytest.approx(spearman(pb["BI"], pb["delta_loss"]))


def test_angular_distance_and_cosine_laws():
    g = torch.Generator().manual_seed(0)
    h = torch.randn(5, 7, 33, generator=g) * 10
    d = angular(h, h)
    print(f"angular(h, h): max {d.abs().max().item():.1e}; angular(h, -h) min {angular(h, -h).min().item():.6f}")
    assert torch.equal(d, torch.zeros_like(d)) and torch.equal(cosine(h, h), torch.ones_like(d))
    assert torch.allclose(angular(h, -h), torch.ones_like(d))
    # hand case: 90 degrees is 1/2, 60 degrees is 1/3
    a, b, c = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 2.0]), torch.tensor([0.5, 3 ** 0.5 / 2])
    assert angular(a, b).item() == pytest.approx(0.5, abs=1e-15) and angular(a, c).item() == pytest.approx(1 / 3)
    # the Gromov rule takes the n-block run that starts at the least distant l
    assert angular_rule([0.3, 0.1, 0.2], 2) == (2, 3) and angular_rule([0.1, 0.1], 1) == (1,)


def test_spearman_laws_and_scipy_reference():
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    x = rng.normal(size=30)
    assert spearman(x, x) == 1.0 and spearman(x, -x) == -1.0
    assert spearman(x, np.exp(x)) == 1.0  # ranks only
    worst = 0.0
    for _ in range(20):
        a, b = rng.integers(0, 6, 25).astype(float), rng.normal(size=25)  # ties in a
        ref = scipy_stats.spearmanr(a, b).statistic
        worst = max(worst, abs(spearman(a, b) - ref))
        assert np.array_equal(rankdata(a), scipy_stats.rankdata(a))
    print(f"Spearman vs scipy.stats.spearmanr with ties: max |diff| {worst:.2e}")
    assert worst < 1e-12
    assert spearman([1, 1, 1], [1, 2, 3]) != spearman([1, 1, 1], [1, 2, 3])  # constant side: NaN


def test_paired_bootstrap_laws():
    from depthaudit.depth.importance import bootstrap_spearman

    rng = np.random.default_rng(1)
    target = rng.normal(size=(40, 12)) + np.arange(12)
    noisy = target + rng.normal(size=target.shape) * 3
    boot = bootstrap_spearman({"self": ("mean", target), "copy": ("mean", noisy), "same": ("mean", noisy),
                               "fixed": ("fixed", np.arange(12.0)), "rms": ("rms", np.abs(target))}, target, 200, 0)
    assert np.all(boot["self"] == 1.0)  # a score that is the target ranks it perfectly in every resample
    assert np.array_equal(boot["copy"], boot["same"])  # one resample serves every score: paired
    ref = [spearman(np.arange(12.0), target[idx].mean(0))
           for idx in (np.random.default_rng(0).integers(0, 40, 40) for _ in range(3))]
    print("fixed-score ρ on the first resamples", boot["fixed"][:3], "reference", ref)
    assert np.allclose(boot["fixed"][:1], ref[:1])


def test_importance_command_on_a_gguf_file_offline(files, tmp_path, capsys):
    root, _ = files
    out = tmp_path / "out"
    argv = ["saturation", "--family", "hf", "--model", str(root / "tiny-f32.gguf"), "--text",
            str(root / "tokens.npy"), "--context", "16", "--analysis-batches", "2", "--batch-size", "4",
            "--importance", "2", "--bootstrap", "30", "--out", str(out)]
    assert main(argv) == 0
    doc = json.loads((out / "saturation_hf_tokens.json").read_text())
    rec = doc["runs"][str(root / "tiny-f32.gguf")]
    prov = rec["provenance"]["model"]
    assert prov["format"] == "gguf" and prov["quantization"] == "ALL_F32" and len(prov["sha256"]) == 64
    imp = rec["importance"]
    assert imp["windows"] == 8 and len(imp["per_block"]["delta_loss"]) == LAYERS
    assert set(imp["pruning"]) == {"1", "2"} and set(imp["spearman"]) >= {"BI", "AG", "V", "angular_1"}
    for row in imp["pruning"]["2"]:
        assert len(row["blocks"]) == 2 and np.isfinite(row["delta_loss"])
    gromov = next(r for r in imp["pruning"]["2"] if r["rule"] == "angular (Gromov)")["blocks"]
    d2 = imp["angular"]["2"]
    assert gromov[0] - 1 == int(np.argmin(d2))
    table = (out / "importance_hf_tokens.md").read_text()
    assert "Spearman" in table and (out / "importance_tiny-f32.gguf.png").stat().st_size > 0
    assert "Spearman ρ" in capsys.readouterr().out
    assert main(argv) == 0  # resumed from the stored run
    bad = ["saturation", "--family", "hf", "--model", str(root / "tiny-f32.gguf"), "--importance", "0", "--out",
           str(tmp_path / "b")]
    assert main(bad) == 2
    assert main(["saturation", "--importance", "--out", str(tmp_path / "c")]) == 2


def test_growth_arms_insert_function_preserving_blocks_at_the_highest_and_lowest_v(files, tmp_path):
    from depthaudit.experiments.lm_grow import attach, candidate_block

    root, ref = files
    stream = HFStream(ref)
    x = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        plain = stream(x)
        for pos in (0, 2, LAYERS):  # entering layer 1, between layers, after the last layer
            hooks = attach(stream.layers, pos, candidate_block(D, 4, 42, pos))
            grown = stream(x)
            for h in hooks:
                h.remove()
            assert torch.equal(plain, grown), pos
    out = tmp_path / "g"
    argv = ["saturation", "--family", "hf", "--model", str(root / "tiny-f32.gguf"), "--text", str(root / "tokens.npy"),
            "--context", "16", "--analysis-batches", "2", "--batch-size", "4", "--grow-steps", "3", "--grow-train",
            "block", "--grow-lr", "1e-2", "--out", str(out)]
    assert main(argv) == 0
    rec = json.loads((out / "saturation_hf_tokens.json").read_text())["runs"][str(root / "tiny-f32.gguf")]
    g, v = rec["grow"], rec["signal"]["V"]
    arms = g["arms"]
    print({k: (a["position"], a["held_out_before"], a["held_out_after"]) for k, a in arms.items()})
    assert arms["high-V"]["position"] == int(np.argmax(v)) and arms["low-V"]["position"] == int(np.argmin(v))
    assert all(a["function_preserving"] for a in arms.values())
    none = arms["none"]  # frozen model, nothing inserted: not one bit of the held-out loss moves
    assert none["held_out_before"] == none["held_out_after"] and none["decrease"] == 0.0
    assert arms["high-V"]["held_out_after"] != arms["high-V"]["held_out_before"]  # the new block did learn
    assert isinstance(g["V_predicts_order"], bool)
    assert "growth" in (out / "importance_hf_tokens.md").read_text()


def test_windows_start_with_bos_for_a_tokenizer_that_adds_one():
    from depthaudit.data.text import load_text
    from depthaudit.experiments.pretrained import tokens_for, window_bos

    class Tok:  # adds BOS = 1 before every sequence, like Gemma's; ids are the characters' codes
        bos_token_id = 1

        def __call__(self, text):
            return {"input_ids": [1] + [ord(c) for c in text]}

    class NoBos(Tok):
        def __call__(self, text):
            return {"input_ids": [ord(c) for c in text]}

    assert window_bos(Tok()) == 1 and window_bos(NoBos()) is None and window_bos(None) is None
    ids, _ = tokens_for(None, Tok(), 2**20, "m")
    assert ids[0] != 1  # the text's single BOS is dropped: each window gets its own
    data = load_text(None, 16, "cpu", tokens=ids, vocab=2**20, bos=1)
    x, y = data.x_train, data.y_train
    assert torch.all(x[:, 0] == 1) and torch.equal(x[:, 1:], y[:, :-1]) and x.shape == y.shape == (x.shape[0], 16)
    assert np.array_equal(y.flatten().numpy(), ids[: y.numel()])  # the targets are the text, in order, none lost
    plain = load_text(None, 16, "cpu", tokens=ids, vocab=2**20)
    assert torch.equal(plain.x_train[:, 1:], plain.y_train[:, :-1]) and plain.provenance()["bos_per_window"] is None
