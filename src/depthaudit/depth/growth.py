"""AG_l and the growth value V_l at every candidate position of a residual model.

Candidates are the stream positions ``l = 0..L`` (every one is shape-preserving in these models): a
zero-output block ``h ↦ h + V ψ(h)`` with ``V = 0`` can be inserted after ``h_l`` without changing any
output. Per analysis batch, with the **mean** loss over the batch and the model in eval mode (so no
normalisation couples examples):

* ``Q_l = ∂ℓ_mean/∂h_l`` as one flattened tensor; ``AG_l = ‖Q_l‖`` (one forward + one backward per
  batch), averaged over batches. The per-example value is ``‖∂ℓ_b/∂h_{l,b}‖ = B·‖Q_{l,b}‖``; its max over
  the batches is reported. ``AG_l/√dim`` (dim = numel of one batch's tensor) is for plots only.
* ``V_l = ‖Ψ Ψ⁺ Q_l‖`` with Q reshaped to (positions × d) and Ψ the candidate block's features at each
  position (positions × m): the norm of the activation gradient's projection onto the span of the
  features — the first-order value of the new block's output projection. Computed in float64 through
  an SVD with a relative rank cut, so rank-deficient features are handled; ``V_l ≤ AG_l`` always.
"""

import statistics

import torch
import torch.nn.functional as F

from ..models.base import ResidualModel
from ..models.resmlp import LN_EPS
from ..models.resnet import ResNetCIFAR
from .insert import block_features, zero_block


def mlp_features(h: torch.Tensor, fc1: torch.nn.Linear) -> torch.Tensor:
    """ResMLP-family features ψ(h) = GELU(fc1(LN(h))), flattened to (positions, m)."""
    u = F.layer_norm(h, h.shape[-1:], eps=LN_EPS)
    return F.gelu(fc1(u)).reshape(-1, fc1.out_features)


def growth_value(psi: torch.Tensor, q: torch.Tensor, rtol: float = 1e-10) -> float:
    """``‖Ψ Ψ⁺ Q‖_F`` in float64: Ψ (n × m) features, Q (n × d) activation gradients."""
    psi, q = psi.double(), q.double()
    u, s, _ = torch.linalg.svd(psi, full_matrices=False)
    keep = s > rtol * s.max() if s.numel() and s.max() > 0 else torch.zeros_like(s, dtype=torch.bool)
    ur = u[:, keep]  # orthonormal basis of the feature span
    return (ur.T @ q).norm().item()


def activation_gradients(model: ResidualModel, batches, feature_fn=None, tangent_fn=None, loss_fn=None,
                         value_fn=None, observe=None) -> dict:
    """AG_l (mean over batches), per-example max, coordinate-normalised score, AGmax, and V_l if asked.

    ``batches`` yields ``(x, y)``; ``feature_fn(l, h_l) -> Ψ`` gives the candidate's tangent features at ``h_l``
    (e.g. :func:`zero_block_features`); omit it to skip V_l. ``tangent_fn(l, h_l, Q_l)`` maps the gradient to
    the (positions × d) matrix the new block's output sees (default: reshape). ``value_fn(l, h_l, Q_l) -> V``
    replaces both for a tangent space that is not one shared feature matrix (ResNet: :func:`resnet_value`).
    ``observe(x, y, logits, states, qs)`` sees each batch's forward and backward (other per-layer scores share
    the pass: :class:`depthaudit.depth.importance.StreamScores`).
    """
    tangent_fn = tangent_fn or (lambda i, h, q: q.reshape(-1, q.shape[-1]))
    if value_fn is None and feature_fn is not None:
        value_fn = lambda i, h, q: growth_value(feature_fn(i, h), tangent_fn(i, h, q))  # noqa: E731
    loss_fn = loss_fn or F.cross_entropy  # mean over the batch (and over positions for a language model)
    was_training = model.training
    model.eval()
    ag, per_ex_max, coord, vals, n, per_batch = None, None, None, None, 0, []
    for x, y in batches:
        logits, states = model(x, return_states=True)
        qs = torch.autograd.grad(loss_fn(logits, y), states)  # mean loss, one backward
        if observe is not None:
            observe(x, y, logits.detach(), [h.detach() for h in states], qs)
        norms = [q.double().norm().item() for q in qs]  # float64, like V, so V ≤ AG holds to rounding
        ex = [(q.flatten(1).norm(dim=1) * q.shape[0]).max().item() for q in qs]
        per_batch.append(norms)
        ag = norms if ag is None else [a + b for a, b in zip(ag, norms, strict=True)]
        per_ex_max = ex if per_ex_max is None else [max(a, b) for a, b in zip(per_ex_max, ex, strict=True)]
        coord = [q.numel() ** -0.5 for q in qs]
        if value_fn is not None:
            with torch.no_grad():
                v = [value_fn(i, h.detach(), q) for i, (h, q) in enumerate(zip(states, qs, strict=True))]
            vals = v if vals is None else [a + b for a, b in zip(vals, v, strict=True)]
        n += 1
    model.train(was_training)
    if n == 0:
        raise ValueError("no analysis batches")
    ag = [a / n for a in ag]
    out = {"AG": ag, "AG_per_example_max": per_ex_max, "AG_coord": [a * c for a, c in zip(ag, coord, strict=True)],
           "AGmax": max(ag), "batches": n, "loss_reduction": "mean", "AG_per_batch": per_batch}
    if vals is not None:
        out["V"] = [v / n for v in vals]
    return out


def separated_test(sig: dict, delta: float, margin: float | None, n_examples: int) -> dict:
    """The separated test of saturation (the depth-sufficiency paper's finite-sample form), per depth.

    H0: Γ ≤ δ (saturated) against H1: Γ ≥ δ + 2t, decided at the threshold δ + t on the statistic
    ``max_l ‖ĝ_l‖`` (= AGmax of the analysis batches): "not saturated" when it exceeds δ + t. It is correct
    whenever the estimate is within t of the population value and Γ lies outside (δ, δ + 2t). ``margin`` is t;
    None takes t = 2 standard errors of the AGmax layer's per-batch AG (ours; needs ≥ 2 batches).
    """
    stat = sig["AGmax"]
    rule = "given (--margin)"
    if margin is None:
        rows = sig.get("AG_per_batch") or []
        top = max(range(len(sig["AG"])), key=sig["AG"].__getitem__)
        vals = [r[top] for r in rows]
        margin = 2 * statistics.stdev(vals) / len(vals) ** 0.5 if len(vals) > 1 else None
        rule = "2 standard errors of the AGmax layer over the analysis batches (ours)"
    decision = None if margin is None else ("not saturated" if stat > delta + margin else "saturated")
    return {"H0": "Gamma <= delta", "H1": "Gamma >= delta + 2t", "delta": delta, "margin": margin,
            "margin_rule": rule if margin is not None else "one batch: give --margin", "threshold":
            None if margin is None else delta + margin, "statistic": stat, "n_examples": n_examples,
            "decision": decision}


def channel_value(n: torch.Tensor, q: torch.Tensor) -> float:
    """``sqrt(Σ_c ‖P_c q_c‖²)`` in float64, ``P_c`` the projection onto channel c's span of ``{n_c, 1}``; (B, C, H, W).

    The growth value of a tangent space that is per channel (a zero block whose output is ``γ_c·n_c + β_c``):
    ``‖P_c q_c‖² = P·q̄_c² + ⟨ñ_c, q̃_c⟩²/‖ñ_c‖²`` with centred ``ñ, q̃`` over the ``P`` positions of channel c.
    """
    c = q.shape[1]
    n = n.double().transpose(0, 1).reshape(c, -1)  # (C, P)
    q = q.double().transpose(0, 1).reshape(c, -1)
    qm, nm = q.mean(1, keepdim=True), n.mean(1, keepdim=True)
    nc, qc = n - nm, q - qm
    den = (nc * nc).sum(1)
    reg = torch.where(den > 1e-300, (nc * qc).sum(1) ** 2 / den.clamp_min(1e-300), torch.zeros_like(den))
    return (q.shape[1] * qm.squeeze(1) ** 2 + reg).sum().sqrt().item()


def resnet_value(model: ResNetCIFAR, seed_of):
    """``value_fn(l, h_l, Q_l)`` for :func:`activation_gradients` on a ResNet-CIFAR: V of the insertion ``grow`` does.

    At position l the zero block is ``model.zero_block(l, seed_of(l))`` (bn2 γ = β = 0, the block the matched
    insertion and ``grow`` use); its branch is ``γ_c·n_c + β_c`` and the ReLU after the residual sum passes
    ``Q ⊙ (h_l > 0)``, so V_l = :func:`channel_value` of ``n`` and that masked gradient.
    """
    blocks = {}

    def value_fn(pos, h, q):
        if pos not in blocks:
            blocks[pos] = model.zero_block(pos, seed_of(pos)).eval()
        return channel_value(blocks[pos].normalized(h), q * (h > 0))

    return value_fn


def credit_signal(method, model: ResidualModel, batches, feature_fn=None) -> dict:
    """AG_l and V_l from a credit method's own credit instead of the true gradient (depth under a method).

    Per batch the method's credit ``c_l`` (per-example convention, ``∂(Σ_b ℓ_b)/∂h_l`` under BP) is put in the
    mean-loss convention of :func:`activation_gradients` (÷ B), so under BP these equal AG_l and V_l. Model
    in eval mode; nothing is trained and no ``.grad`` is touched.
    """
    was_training = model.training
    model.eval()
    ag, vals, n = None, None, 0
    for x, y in batches:
        states, credits = method.measure_credits(model, x, y)  # [h_0..h_L], [c_0..c_L], each (B, …)
        qs = [c / x.shape[0] for c in credits]
        norms = [q.double().norm().item() for q in qs]
        ag = norms if ag is None else [a + b for a, b in zip(ag, norms, strict=True)]
        if feature_fn is not None:
            with torch.no_grad():
                v = [growth_value(feature_fn(i, h.detach()), q.reshape(-1, q.shape[-1]))
                     for i, (h, q) in enumerate(zip(states, qs, strict=True))]
            vals = v if vals is None else [a + b for a, b in zip(vals, v, strict=True)]
        n += 1
    model.train(was_training)
    out = {"AG": [a / n for a in ag], "AGmax": max(ag) / n, "batches": n, "method": method.name}
    if vals is not None:
        out["V"] = [v / n for v in vals]
    return out


def zero_block_features(model: ResidualModel, seed_of):
    """``feature_fn`` for :func:`activation_gradients`: the tangent features ``[ψ, 1]`` of a zero block at ``l``.

    The block is the one the gradient-matched insertion puts there (:func:`depthaudit.depth.insert.zero_block`
    from ``seed_of(l)``): V, matched insertion and growth share one tangent space.
    """
    blocks = {}

    def feature_fn(pos, h):
        if pos not in blocks:
            blocks[pos] = zero_block(model, seed_of(pos)).to(h.device).eval()
        return block_features(blocks[pos], h)

    return feature_fn
