"""Audit a real peer as it is: biotorch's feedback alignment, trained by a plain PyTorch loop, on MNIST-1D.

biotorch (``pip install --no-deps biotorch==0.0.16``; its modules import only torch) converts every ``nn.Linear``
of a model into an FA layer whose custom autograd backward sends ``g·B`` to its input instead of ``g·W``. Here
it converts depthaudit's reference ResMLP (embedding, both Linears of every block, the head; LayerNorm and GELU
keep their exact derivatives). The run is biotorch's own training — one ``loss.backward()`` through the FA
layers, AdamW — not depthaudit's recipe. The evaluator captures the credit at every stream state from that
backward, measures it against the exact gradient of a BP twin of the same weights, and the monitor writes the
audit report (D1/D2 every epoch, D3 against a frozen-blocks twin trained by the same loop).

Then, on the trained weights, the credits biotorch's backward assigns are compared with depthaudit's own ``fa``
given **the same B** (biotorch's ``weight_backward`` matrices): they are the same rule, so they must agree to
float rounding. depthaudit's ``fa`` with its own draw of B (U(±1/√fan_in) instead of biotorch's Xavier) is shown
beside it.

    python examples/biotorch_fa.py --epochs 5 --out results/biotorch_fa
"""

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from depthaudit.data import load_data
from depthaudit.diagnostics import CreditCosine, RobustCosine, Snapshot
from depthaudit.errors import UsageError
from depthaudit.evaluator import CreditEvaluator, TrainingMonitor, bp_twin, frozen_twin
from depthaudit.loop import evaluate
from depthaudit.methods import FA
from depthaudit.models import build_model
from depthaudit.runner import probe_batches


def biotorch_fa(model: torch.nn.Module) -> torch.nn.Module:
    """Convert ``model``'s Linear layers in place to biotorch's FA layers (weights kept, B drawn Xavier-uniform)."""
    try:
        from biotorch.module.biomodule import BioModule
    except ImportError:
        raise UsageError("this example needs biotorch: pip install --no-deps biotorch==0.0.16 (its layers import "
                         "only torch; --no-deps keeps its torchvision/jupyter pins off your torch)") from None
    return BioModule(model, mode="fa").module  # converts in place and returns the same model


def fit(net, data, epochs: int, seed: int, lr: float = 1e-3, batch: int = 128, on_epoch=None, log=print):
    """A plain PyTorch loop: shuffle, forward, cross-entropy, backward (biotorch's FA backward), AdamW step."""
    opt = torch.optim.AdamW([p for p in net.parameters() if p.requires_grad], lr=lr, weight_decay=0.01)
    gen = torch.Generator().manual_seed(seed)
    n = data.x_train.shape[0]
    for epoch in range(1, epochs + 1):
        net.train()
        for idx in torch.randperm(n, generator=gen).split(batch):
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(net(data.x_train[idx]), data.y_train[idx])
            loss.backward()
            opt.step()
        test_loss, acc = evaluate(net, data.x_test, data.y_test)
        log(f"epoch {epoch}/{epochs}  train_loss(last batch) {loss.item():.4f}  test_loss {test_loss:.4f}  "
            f"test_acc {acc:.4f}")
        if on_epoch is not None:
            on_epoch(epoch)
    return evaluate(net, data.x_test, data.y_test)[1]


def compare_with_depthaudit_fa(model, batches, seed: int) -> dict:
    """Per-layer Γ and credits: biotorch's captured backward vs depthaudit's ``fa`` (same B; and its own B)."""
    ev = CreditEvaluator(model, batches)
    mine = ev()
    same_b = FA(model, seed)
    for i, blk in enumerate(model.blocks, start=1):
        for k in ("fc1", "fc2"):
            same_b.feedback[f"block{i}.{k}"] = getattr(blk, k).weight_backward.detach().clone()
    same_b.feedback["readout.out_head"] = model.readout.out_head.weight_backward.detach().clone()
    # depthaudit's own measurement runs the model's forward: inside the BP twin, so that its reference is exact
    # (on the converted layers autograd would run biotorch's FA backward and call FA "the reference")
    model.eval()
    with bp_twin(model):
        p_same, p_own = Snapshot(model, same_b, batches), Snapshot(model, FA(model, seed), batches)
        cap = ev.last_snapshot.credits
        rel = [((a - b).abs().max() / b.abs().max()).item() for a, b in zip(cap, p_same.credits, strict=True)]
        out = {"gamma_biotorch": mine["credit_cosine"]["per_layer"],
               "gamma_depthaudit_fa_same_B": CreditCosine().compute(p_same)["per_layer"],
               "gamma_depthaudit_fa_own_B": CreditCosine().compute(p_own)["per_layer"],
               "robust_biotorch": mine["robust_cosine"]["per_layer"],
               "robust_depthaudit_fa_same_B": RobustCosine().compute(p_same)["per_layer"],
               "credit_max_rel_diff_same_B": rel, "evaluator": mine["evaluator"]}
    # the same through the evaluator (a depthaudit method is measured inside the BP twin there)
    out["gamma_evaluator_fa_same_B"] = CreditEvaluator(model, batches, credit=same_b)()["credit_cosine"]["per_layer"]
    # the pitfall the twin avoids: outside it, the "reference" is biotorch's own FA backward
    without_twin = CreditCosine().compute(Snapshot(model, same_b, batches))["per_layer"]
    out["gamma_depthaudit_fa_same_B_without_twin"] = without_twin
    out["max_abs_gamma_diff_same_B"] = max(abs(a - b) for a, b in zip(
        out["gamma_biotorch"], out["gamma_depthaudit_fa_same_B"], strict=True))
    out["max_abs_robust_diff_same_B"] = max(abs(a - b) for a, b in zip(
        out["robust_biotorch"], out["robust_depthaudit_fa_same_B"], strict=True))
    return out


def main(argv=None):
    """Train biotorch FA on MNIST-1D with a plain loop, audit it with the evaluator, print the card."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--d-hidden", type=int, default=64)
    p.add_argument("--num-blocks", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="results/biotorch_fa")
    a = p.parse_args(argv)
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    data = load_data("mnist1d", None, False, torch.device("cpu"))
    model = build_model("resmlp", data.input_shape, data.num_classes, a.d_hidden, a.num_blocks, None, a.seed)
    torch.manual_seed(a.seed)  # biotorch draws its feedback B from the global generator
    biotorch_fa(model)
    frozen = frozen_twin(model)  # at initialisation: the D3 baseline, same B, trained by the same loop
    batches = probe_batches(data, a.seed, 10, 128)
    mon = TrainingMonitor(model, batches, name="biotorch-fa", log=log)
    mon.step(0)
    log("biotorch FA, all blocks trained:")
    acc = fit(model, data, a.epochs, a.seed, on_epoch=mon.step, log=log)
    log("biotorch FA, blocks frozen at init (D3 baseline):")
    frozen_acc = fit(frozen, data, a.epochs, a.seed, log=log)
    mon.report(test_acc=acc, frozen_acc=frozen_acc, budget=a.epochs, dataset="mnist1d",
               arch="resmlp+biotorch-fa", seed=a.seed, argv=["examples/biotorch_fa.py", *(argv or sys.argv[1:])])
    mon.write(a.out)
    print(mon.card())
    cmp = compare_with_depthaudit_fa(model, batches, a.seed)
    f = lambda v: " ".join(f"{x:+.4f}" for x in v)  # noqa: E731
    print("\nbiotorch FA vs depthaudit fa on the trained weights (l = 0..L), reference: "
          f"{cmp['evaluator']['reference']} (BP twin logits rel. diff {cmp['evaluator']['twin_logits_max_diff']:.1e})")
    print(f"  Γ_l biotorch (captured backward)     {f(cmp['gamma_biotorch'])}")
    print(f"  Γ_l depthaudit fa, biotorch's B      {f(cmp['gamma_depthaudit_fa_same_B'])}")
    print(f"  Γ_l depthaudit fa, its own B draw    {f(cmp['gamma_depthaudit_fa_own_B'])}")
    print(f"  (without the BP twin, reference = FA itself {f(cmp['gamma_depthaudit_fa_same_B_without_twin'])})")
    print(f"  same B: max |ΔΓ_l| {cmp['max_abs_gamma_diff_same_B']:.1e}, max |Δrobust_l| "
          f"{cmp['max_abs_robust_diff_same_B']:.1e}, credits max rel. diff per layer "
          + " ".join(f"{x:.1e}" for x in cmp["credit_max_rel_diff_same_B"]))
    print(f"\nwrote {Path(a.out) / 'report.md'}, {Path(a.out) / 'report.json'} and figures")
    return {"report": mon._report, "comparison": cmp}


if __name__ == "__main__":
    main()
