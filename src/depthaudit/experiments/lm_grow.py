"""Growth on a pretrained LM: insert a zero-output block at the highest-V and lowest-V boundary, train, compare.

``saturation --family hf --grow-steps N``: after V_l is measured, three arms start from the same weights and see the
same N training batches (drawn once from the run's seed, from the text's training split):

* ``none``: the model as it is;
* ``high-V``: the candidate block of the boundary with the largest V_l inserted there;
* ``low-V``: the candidate block of the boundary with the smallest V_l inserted there.

The inserted block is the very block V was measured for (:func:`candidate_block`,
same seed, ``fc2 = 0``): ``h_l ↦ h_l + fc2(GELU(fc1(LN(h_l))))``, attached by a hook at the boundary, so the grown
model's outputs equal the intact model's to the bit before training (checked and recorded). AdamW trains the new
block at ``grow_lr`` and the pretrained weights at ``continue_lr`` (``grow_train="block"`` freezes them: only the
block learns, and the ``none`` arm does not move). The
realised decrease is the held-out loss on the analysis windows before minus after; V predicts high-V > low-V.
"""

import time

import numpy as np
import torch

from ..loop import evaluate
from ..models.gpt import lm_loss
from ..models.resmlp import MLPBlock
from ..seeds import derive_seed


def attach(layers, pos: int, block: torch.nn.Module) -> list:
    """Hooks that add ``block(h_pos)`` to the stream at boundary ``pos`` (0: entering layer 1); their handles."""
    if pos == 0:
        def enter(mod, args, kwargs):
            if args:
                return (args[0] + block(args[0]), *args[1:]), kwargs
            h = kwargs["hidden_states"]
            return args, {**kwargs, "hidden_states": h + block(h)}

        return [layers[0].register_forward_pre_hook(enter, with_kwargs=True)]

    def leave(mod, args, out):
        h = out[0] if isinstance(out, tuple) else out
        h = h + block(h)
        return (h, *out[1:]) if isinstance(out, tuple) else h

    return [layers[pos - 1].register_forward_hook(leave)]


def grow_arms(model, hf, data, cfg, sig: dict, x_eval, y_eval, log=None) -> dict:
    """Train the three arms for ``cfg.grow_steps`` steps; the record of each (positions, losses, V, timings)."""
    log = log or (lambda m: None)
    v = sig["V"]
    hi = max(range(len(v)), key=lambda i: (v[i], -i))
    lo = min(range(len(v)), key=lambda i: (v[i], i))
    device = x_eval.device
    d = int(hf.config.hidden_size)
    n = cfg.grow_steps * cfg.batch_size
    gen = torch.Generator().manual_seed(derive_seed(cfg.seed, "grow-windows"))
    reps = -(-n // data.x_train.shape[0])
    idx = torch.cat([torch.randperm(data.x_train.shape[0], generator=gen) for _ in range(reps)])[:n].to(device)
    start = {k: t.clone() for k, t in hf.state_dict().items()}
    loss0, _ = evaluate(model, x_eval, y_eval, cfg.batch_size, lm_loss)
    arms = {}
    for arm, pos in (("none", None), ("high-V", hi), ("low-V", lo)):
        t0 = time.perf_counter()
        hf.load_state_dict(start)
        block, hooks = None, []
        if pos is not None:
            block = candidate_block(d, cfg.mlp_ratio, cfg.seed, pos).to(device)
            hooks = attach(model.layers, pos, block)
        try:
            before, _ = evaluate(model, x_eval, y_eval, cfg.batch_size, lm_loss)
            torch.manual_seed(derive_seed(cfg.seed, "grow") % 2**31)
            groups = []
            if cfg.grow_train == "all":
                hf.requires_grad_(True)
                groups.append({"params": [p for p in hf.parameters()], "lr": cfg.continue_lr})
            if block is not None:
                groups.append({"params": list(block.parameters()), "lr": cfg.grow_lr})
            opt = torch.optim.AdamW(groups, weight_decay=0.0) if groups else None
            model.train()
            train = []
            for s in range(cfg.grow_steps):
                j = idx[s * cfg.batch_size:(s + 1) * cfg.batch_size]
                loss = lm_loss(model(data.x_train[j]), data.y_train[j])
                train.append(loss.item())
                if opt is not None:
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
            model.eval()
            hf.requires_grad_(False)
            after, _ = evaluate(model, x_eval, y_eval, cfg.batch_size, lm_loss)
        finally:
            for h in hooks:
                h.remove()
        arms[arm] = {"position": pos, "V": None if pos is None else v[pos], "AG": None if pos is None else
                     sig["AG"][pos], "held_out_before": before, "held_out_after": after,
                     "decrease": before - after, "function_preserving": before == loss0,
                     "train_loss": train, "seconds": round(time.perf_counter() - t0, 3)}
        log(f"  grow arm {arm} (boundary {pos}): held-out {before:.4f} -> {after:.4f}")
    hf.load_state_dict(start)
    gain = {k: arms[k]["decrease"] - arms["none"]["decrease"] for k in ("high-V", "low-V")}
    return {"steps": cfg.grow_steps, "batch_size": cfg.batch_size, "grow_lr": cfg.grow_lr,
            "model_lr": cfg.continue_lr if cfg.grow_train == "all" else 0.0,
            "held_out_windows": int(x_eval.shape[0]), "arms": arms,
            "gain_over_none": gain, "V_predicts_order": bool(gain["high-V"] > gain["low-V"]),
            "V_equals_AG": bool(np.allclose(sig["V"], sig["AG"], rtol=1e-9, atol=0))}


def candidate_block(d: int, ratio: int, seed: int, pos: int):
    """The zero-output pre-LN MLP block of position ``pos`` (``fc2 = 0``), drawn from ``seed``: V's and growth's."""
    gen = torch.Generator().manual_seed(derive_seed(seed, f"hf-candidate{pos}") % 2**31)
    blk = MLPBlock(d, ratio, gen, "ref")
    with torch.no_grad():
        blk.fc2.weight.zero_()
        blk.fc2.bias.zero_()
    return blk
