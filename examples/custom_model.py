"""Audit your own residual model: a 1-D conv ResNet on MNIST-1D, adapted by naming its parts.

The network below knows nothing about depthaudit; its blocks add their own skip connection. The
adapter names the embedding, the block list and the readout; registering a factory makes it an
``--arch`` choice like the built-in models.

    python examples/custom_model.py --epochs 5 --out results/example_model
    depthaudit --plugin examples.custom_model audit --arch conv1d_resnet --methods bp dfa
"""

import argparse
import sys
from pathlib import Path

import torch
from torch import nn

from depthaudit.config import TrainConfig
from depthaudit.data import load_data
from depthaudit.experiments.audit import AuditConfig, run_audit
from depthaudit.models import MODELS, ResidualAdapter
from depthaudit.report import audit_terminal


class ConvBlock(nn.Module):
    """h + conv(relu(norm(h))) over (B, C, T) — the skip connection lives inside the block."""

    def __init__(self, c):
        super().__init__()
        self.norm = nn.GroupNorm(1, c)
        self.conv = nn.Conv1d(c, c, 5, padding=2)

    def forward(self, h):
        """Return h + f(h)."""
        return h + self.conv(torch.relu(self.norm(h)))


class Conv1dResNet(nn.Module):
    """A user's model: stem → blocks → pool + head."""

    def __init__(self, channels=32, depth=4, num_classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Unflatten(1, (1, -1)), nn.Conv1d(1, channels, 5, padding=2))
        self.layers = nn.ModuleList(ConvBlock(channels) for _ in range(depth))
        self.head = nn.Sequential(nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(channels, num_classes))

    def forward(self, x):
        """Logits."""
        h = self.stem(x)
        for b in self.layers:
            h = b(h)
        return self.head(h)


@MODELS.register("conv1d_resnet", overwrite=True)
def conv1d_resnet(input_shape, num_classes, d_hidden=32, num_blocks=4, mlp_ratio=4, seed=0):
    """Factory with the registry's signature: d_hidden = channels, num_blocks = depth."""
    torch.manual_seed(seed)
    net = Conv1dResNet(d_hidden, num_blocks, num_classes)
    return ResidualAdapter(net, embed="stem", blocks="layers", readout="head", block_includes_residual=True)


def main(argv=None):
    """Audit BP and DFA on the adapted conv ResNet and print the card."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--out", default="results/example_model")
    a = p.parse_args(argv)
    base = TrainConfig(dataset="mnist1d", arch="conv1d_resnet", d_hidden=32, num_blocks=4, epochs=a.epochs)
    data = load_data("mnist1d", None, False, torch.device("cpu"))
    report = run_audit(AuditConfig(base=base, methods=("bp", "dfa")), data, Path(a.out),
                       log=lambda m: print(m, file=sys.stderr))
    print(audit_terminal(report))
    return report


if __name__ == "__main__":
    main()
