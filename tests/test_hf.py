"""Pretrained causal LMs (``saturation --family hf``), offline: tiny random GPT-NeoX and GPT-2 saved to a folder.

AG at every layer boundary is checked against an independent autograd reference that does not use our
hooks: Hugging Face's own ``output_hidden_states`` (the inputs of layers 1..L) and the input of the final
norm (the last layer's output), differentiated with ``torch.autograd.grad``.
"""

import json

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from depthaudit.cli import main  # noqa: E402
from depthaudit.depth.growth import activation_gradients  # noqa: E402
from depthaudit.experiments.pretrained import candidate_features  # noqa: E402
from depthaudit.models.gpt import lm_loss  # noqa: E402
from depthaudit.models.hf import HFStream, load_causal_lm  # noqa: E402

CONFIGS = {
    "neox": lambda: transformers.GPTNeoXConfig(hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                                               intermediate_size=64, vocab_size=97, max_position_embeddings=64,
                                               use_parallel_residual=True),
    "gpt2": lambda: transformers.GPT2Config(n_embd=32, n_layer=3, n_head=4, vocab_size=97, n_positions=64,
                                            bos_token_id=0, eos_token_id=0),
}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    for name, cfg in CONFIGS.items():
        torch.manual_seed(0)
        transformers.AutoModelForCausalLM.from_config(cfg()).save_pretrained(root / name)
    np.save(root / "tokens.npy", np.random.default_rng(0).integers(0, 97, 6000).astype(np.int64))
    return root


def _final_norm(model):
    return model.gpt_neox.final_layer_norm if hasattr(model, "gpt_neox") else model.transformer.ln_f


@pytest.mark.parametrize("name", list(CONFIGS))
def test_ag_at_layer_boundaries_matches_an_independent_reference(saved, name):
    model, tok = load_causal_lm(str(saved / name), None, "cpu")
    assert tok is None  # a weights-only folder: tokens come from a .npy file
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randint(0, 97, (4, 16), generator=g), torch.randint(0, 97, (4, 16), generator=g))
               for _ in range(2)]
    ours = activation_gradients(HFStream(model), batches, loss_fn=lm_loss)
    ref = [0.0] * 4
    model.requires_grad_(True)
    for x, y in batches:
        seen = {}
        hook = _final_norm(model).register_forward_pre_hook(lambda m, a, s=seen: s.setdefault("hL", a[0]))
        out = model(input_ids=x, output_hidden_states=True, use_cache=False)
        hook.remove()
        states = [*out.hidden_states[:3], seen["hL"]]  # inputs of layers 1..3, then the last layer's output
        grads = torch.autograd.grad(lm_loss(out.logits, y), states)
        for i, q in enumerate(grads):
            ref[i] += q.norm().item() / len(batches)
    model.requires_grad_(False)
    diff = max(abs(a - b) / b for a, b in zip(ours["AG"], ref, strict=True))
    print(f"{name}: AG ours {ours['AG']}, reference {ref}, max rel diff {diff:.2e}")
    assert diff < 1e-5
    v = activation_gradients(HFStream(model), batches, loss_fn=lm_loss,
                             feature_fn=candidate_features(32, 4, 0, "cpu"))["V"]
    assert all(0 < a <= b * (1 + 1e-9) for a, b in zip(v, ours["AG"], strict=True))


def test_cross_model_command_offline_with_revision_passed_through(saved, tmp_path, monkeypatch, capsys):
    calls = []
    original = transformers.AutoModelForCausalLM.from_pretrained

    def recording(name, **kw):  # a local folder has no revisions: record it, load without
        calls.append(kw.get("revision"))
        return original(name, **{k: v for k, v in kw.items() if k != "revision"})

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", recording)
    out = tmp_path / "out"
    argv = ["saturation", "--family", "hf", "--model", str(saved / "neox"), str(saved / "gpt2"), "--revision",
            "step143000", "--text", str(saved / "tokens.npy"), "--context", "16", "--continue-steps", "2",
            "--analysis-batches", "2", "--out", str(out)]
    assert main(argv) == 0
    assert calls == ["step143000", "step143000"]
    doc = json.loads((out / "saturation_hf_tokens.json").read_text())
    assert set(doc["runs"]) == {str(saved / "neox"), str(saved / "gpt2")}
    for rec in doc["runs"].values():
        assert rec["config"]["revision"] == "step143000" and rec["provenance"]["model"]["layers"] == 3
        assert len(rec["signal"]["AG"]) == 4 and rec["signal"]["split"].startswith("held-out")
        assert len(rec["history"]) == 1 and rec["history"][0]["train_loss"] is not None  # 2 continued steps
        assert all(v <= a * (1 + 1e-9) for v, a in zip(rec["signal"]["V"], rec["signal"]["AG"], strict=True))
    table = (out / "saturation_hf_tokens.md").read_text()
    assert "step143000" in table and "gpt2" in table and (out / "saturation_hf_tokens.png").stat().st_size > 0
    capsys.readouterr()
    assert main(argv) == 0 and calls == ["step143000", "step143000"]  # resumed: nothing loaded again
    assert main(["report", str(out)]) == 0 and "neox" in capsys.readouterr().out


def test_bad_pretrained_inputs_are_one_line(saved, tmp_path, capsys, monkeypatch):
    cases = [
        (["--model", str(saved / "neox"), "--text", str(tmp_path / "none.txt")], "no such file"),
        (["--model", str(tmp_path / "nowhere")], "no such folder"),
        ([], "needs --model"),
    ]
    text = tmp_path / "t.txt"
    text.write_text("hello world " * 500)
    cases.append((["--model", str(saved / "neox"), "--text", str(text)], "ships no tokenizer"))
    big = tmp_path / "big.npy"
    np.save(big, np.full(500, 1000, dtype=np.int64))
    cases.append((["--model", str(saved / "neox"), "--text", str(big)], "not below the model's vocabulary"))
    for extra, want in cases:
        out = tmp_path / "o"
        assert main(["saturation", "--family", "hf", *extra, "--out", str(out)]) == 2, extra
        err = capsys.readouterr().err.strip().splitlines()
        err = [ln for ln in err if ln.startswith("depthaudit")]
        print(extra, "→", err)
        assert len(err) == 1 and want in err[0] and "Traceback" not in err[0]
        if want in ("no such file", "no such folder", "needs --model"):  # refused before the store is claimed
            assert not out.exists(), extra
    assert main(["saturation", "--model", "x", "--out", str(tmp_path / "p")]) == 2
    assert "--family hf" in capsys.readouterr().err
    monkeypatch.setitem(__import__("sys").modules, "transformers", None)  # the extra not installed
    assert main(["saturation", "--family", "hf", "--model", "x", "--out", str(tmp_path / "q")]) == 2
    assert "pip install 'depthaudit[hf]'" in capsys.readouterr().err


def test_a_changed_model_folder_or_text_is_measured_again_not_reused(saved, tmp_path, capsys):
    """Walk 7 W12: a result is reused only for the same weights and the same text (by content, like a .gguf's)."""
    import shutil
    model, text, out = tmp_path / "m", tmp_path / "t.npy", tmp_path / "out"
    shutil.copytree(saved / "gpt2", model)
    shutil.copy(saved / "tokens.npy", text)
    argv = ["saturation", "--family", "hf", "--model", str(model), "--text", str(text), "--context", "16",
            "--analysis-batches", "1", "--out", str(out)]
    store = out / "saturation_hf_t.json"

    def measured():
        rec = json.loads(store.read_text())["runs"][str(model)]
        return rec["config"]["model_sha256"], rec["config"]["text_sha256"], rec["signal"]["AG"]

    assert main(argv) == 0
    first = measured()
    assert first[0] and first[1]
    assert main(argv) == 0 and "already finished" in capsys.readouterr().err  # same files: reused
    assert measured() == first
    hf = transformers.AutoModelForCausalLM.from_pretrained(model)  # the weights edited in place
    with torch.no_grad():
        hf.transformer.h[0].mlp.c_fc.weight.mul_(5)
    hf.save_pretrained(model)
    capsys.readouterr()
    assert main(argv) == 0
    assert "differs in model_sha256" in capsys.readouterr().err
    second = measured()
    print("AG before/after the edit:", first[2][1], second[2][1])
    assert second[0] != first[0] and second[1] == first[1] and second[2] != first[2]
    np.save(text, np.random.default_rng(7).integers(0, 97, 6000).astype(np.int64))  # other tokens, same name
    assert main(argv) == 0
    third = measured()
    assert third[0] == second[0] and third[1] != second[1] and third[2] != second[2]
