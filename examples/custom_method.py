"""Audit your own credit method: register it by name, then run the audit on it beside BP.

The method here, "noisy_bp", is BP's credit plus Gaussian noise of a fixed size relative to each
layer's credit (relative_noise = 1 means signal and noise of equal rms) — a known-answer probe of how
the audit's checks respond to degraded credit.

    python examples/custom_method.py --epochs 5 --out results/example_method
    depthaudit --plugin examples.custom_method audit --methods bp noisy_bp   # same, from the CLI
"""

import argparse
import sys
from pathlib import Path

import torch

from depthaudit.config import TrainConfig
from depthaudit.data import load_data
from depthaudit.experiments.audit import AuditConfig, run_audit
from depthaudit.methods import METHODS, CreditMethod
from depthaudit.methods.bp import bp_credits
from depthaudit.recipe import rms
from depthaudit.report import audit_terminal


@METHODS.register("noisy_bp", overwrite=True)
class NoisyBP(CreditMethod):
    """c_l = g_l + relative_noise · rms(g_l) · ξ_l, ξ_l ~ N(0, I) from a generator seeded by the run."""

    name = "noisy_bp"
    needs_input_grad = True  # the trace keeps block inputs differentiable, so exact credits are available
    relative_noise = 1.0

    def __init__(self, model, seed):
        super().__init__(model, seed)
        self.gen = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)

    def credits(self, model, tr, e):
        """Exact credits plus noise; ``tr.states`` are h_0..h_L, ``e`` the (B, C) output error."""
        out = []
        for g in bp_credits(tr):
            noise = torch.randn(g.shape, generator=self.gen, device=g.device, dtype=g.dtype)
            out.append(g + self.relative_noise * rms(g) * noise)
        return out


def main(argv=None):
    """Audit BP and noisy_bp on MNIST-1D and print the card."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--d-hidden", type=int, default=128)
    p.add_argument("--out", default="results/example_method")
    a = p.parse_args(argv)
    base = TrainConfig(dataset="mnist1d", d_hidden=a.d_hidden, num_blocks=4, epochs=a.epochs)
    data = load_data("mnist1d", None, False, torch.device("cpu"))
    report = run_audit(AuditConfig(base=base, methods=("bp", "noisy_bp")), data, Path(a.out),
                       log=lambda m: print(m, file=sys.stderr))
    print(audit_terminal(report))
    return report


if __name__ == "__main__":
    main()
