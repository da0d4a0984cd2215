"""The evaluator proves it audits the user's own network: the adapter is verified, the batches checked."""

import pytest
import torch
from torch import nn

import depthaudit as da
from depthaudit.errors import UsageError

D, C, B = 6, 3, 16


class Block(nn.Module):
    """``h + W2 relu(W1 h)`` when ``residual``, else the branch alone (or a plain layer ``relu(W h)``)."""

    def __init__(self, residual: bool, plain: bool = False):
        super().__init__()
        self.residual, self.plain = residual, plain
        self.l1, self.l2 = nn.Linear(D, D), nn.Linear(D, D)

    def forward(self, h):
        if self.plain:
            return torch.relu(self.l1(h))
        f = self.l2(torch.relu(self.l1(h)))
        return h + f if self.residual else f


class Net(nn.Module):
    def __init__(self, residual=True, plain=False, scale_out=False):
        super().__init__()
        torch.manual_seed(0)
        self.stem, self.head = nn.Linear(4, D), nn.Linear(D, C)
        self.layers = nn.ModuleList(Block(residual, plain) for _ in range(3))
        self.scale_out = scale_out

    def forward(self, x):
        h = self.stem(x)
        for b in self.layers:
            h = b(h) if b.residual or b.plain else h + b(h)
        return self.head(torch.relu(h)) * 2 if self.scale_out else self.head(h)


def _batches(n=2, dtype=torch.float32):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(B, 4, generator=g, dtype=dtype), torch.randint(0, C, (B,), generator=g)) for _ in range(n)]


def _refused(model, batches=None, match="", **kw):
    with pytest.raises(UsageError, match=match) as exc:
        da.CreditEvaluator(model, batches or _batches(), **kw)
    print(exc.value)
    assert len(str(exc.value).splitlines()) == 1
    return str(exc.value)


def test_a_faithful_adapter_is_verified_and_measured():
    model = da.ResidualAdapter(Net(), embed="stem", blocks="layers", readout="head", block_includes_residual=True)
    ev = da.CreditEvaluator(model, _batches())
    print(ev.verified)
    assert ev.verified["logits_max_diff"] <= 1e-6
    assert ev()["stream"]


def test_the_three_misdescribed_networks_are_refused():
    # 1. the forward ends in head(relu(h)) * 2, the adapter's readout is head alone: another function
    net = Net(scale_out=True)
    msg = _refused(da.ResidualAdapter(net, embed="stem", blocks="layers", readout="head", block_includes_residual=True),
                   match="differs from Net's own forward")
    own = net(_batches()[0][0])
    h = net.stem(_batches()[0][0])
    for b in net.layers:
        h = b(h)
    print("independent |Δlogits| / max(1, max|logits|):",
          ((net.head(h) - own).abs().max() / own.abs().max().clamp_min(1)).item())
    assert "tolerance 0.0001" in msg
    # 2. residual blocks (h + f(h)) declared as branches: the stream would get h twice
    _refused(da.ResidualAdapter(Net(), embed="stem", blocks="layers", readout="head", block_includes_residual=False),
             match="block 'layers.0': with every parameter at zero it returns 1.00")
    # 3. a plain MLP (relu(W h), no skip) declared residual: its logits match, its blocks are not h + f(h)
    plain = da.ResidualAdapter(Net(residual=False, plain=True), embed="stem", blocks="layers", readout="head",
                               block_includes_residual=True)
    _refused(plain, match="block 'layers.0': block\\(h\\) − h is not its branch")


def test_a_flat_sequential_is_described_by_block_paths():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, D), Block(True), Block(True), Block(True), nn.Linear(D, C))
    model = da.ResidualAdapter(net, embed="0", blocks=["1", "2", "3"], readout="4", block_includes_residual=True)
    ev = da.CreditEvaluator(model, _batches())
    assert ev.verified["logits_max_diff"] <= 1e-6 and len(model.blocks) == 3
    with pytest.raises(UsageError, match="blocks='1' is a Block, not a list of blocks") as exc:
        da.ResidualAdapter(net, embed="0", blocks="1", readout="4")
    print(exc.value)
    with pytest.raises(UsageError, match="has no submodule '9'; its children are 0, 1, 2, 3, 4"):
        da.ResidualAdapter(net, embed="0", blocks=["1", "9"], readout="4")


def _model():
    return da.ResidualAdapter(Net(), embed="stem", blocks="layers", readout="head", block_includes_residual=True)


def test_batches_the_model_cannot_take_are_refused_in_one_line():
    _refused(_model(), _batches(dtype=torch.float64), match="probe batch 0: x is float64 but the model's parameters "
             "are float32")
    _refused(_model(), [(x, y.float()) for x, y in _batches()], match="labels y are float32")
    _refused(_model(), [(x, y.int()) for x, y in _batches()], match=r"labels y are int32; .* pass y.long\(\)")
    _refused(_model(), [(x, y + C) for x, y in _batches()], match="labels span 3..5 but the model has 3 classes")
    _refused(_model(), [(torch.randn(B, 7), y) for _, y in _batches()], match=r"x of shape \(16, 7\) does not fit")


def test_device_moves_the_probe_batches():
    ev = da.CreditEvaluator(_model(), _batches(), device="cpu")
    assert all(x.device.type == "cpu" for x, _ in ev.batches)
    if not torch.cuda.is_available():
        _refused(_model(), device="cuda", match="CUDA is not available")
