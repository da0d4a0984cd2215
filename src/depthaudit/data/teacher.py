"""Teacher–student synthetic data for StudentNet (SPEC §1), generated from a fixed seed (no download).

A random teacher labels Gaussian inputs into C = 10 classes: ``x ~ N(0, I_64)``; teacher =
``Linear(64, 128) → φ_α → Linear(128, 128) → φ_α → Linear(128, 10)`` with weights N(0, 1/fan_in) and no
biases, ``φ_α(z) = (1−α)·z + α·tanh z``; label = argmax of the teacher's logits after subtracting each
logit's mean and dividing by its std over the training inputs (so the classes are roughly balanced).
α = 0 makes the teacher linear,
α = 1 a tanh net. 10,000 train / 2,000 test examples, teacher and data from numpy seed 0.

Registered as ``teacher-a0``, ``teacher-a0.25``, ``teacher-a0.5``, ``teacher-a1`` (the reference's α grid).
The input width, teacher shape, sizes and the centring are ours: SPEC gives only the activation, C and
the Gaussian inputs.
"""

import hashlib

import numpy as np

from .base import DATASETS, ArrayData

ALPHAS = (0.0, 0.25, 0.5, 1.0)
D_IN, WIDTH, CLASSES, N_TRAIN, N_TEST, SEED = 64, 128, 10, 10_000, 2_000, 0


def phi(z: np.ndarray, alpha: float) -> np.ndarray:
    """``φ_α(z) = (1−α)·z + α·tanh z``."""
    return (1.0 - alpha) * z + alpha * np.tanh(z)


def make_teacher_data(alpha: float, n_train: int = N_TRAIN, n_test: int = N_TEST, seed: int = SEED) -> ArrayData:
    """Inputs, teacher labels and provenance for one α (deterministic in ``seed``)."""
    rng = np.random.default_rng(seed)
    dims = [D_IN, WIDTH, WIDTH, CLASSES]
    ws = [rng.standard_normal((a, b)) / np.sqrt(a) for a, b in zip(dims, dims[1:], strict=False)]
    x = rng.standard_normal((n_train + n_test, D_IN))

    def logits(z):
        for w in ws[:-1]:
            z = phi(z @ w, alpha)
        return z @ ws[-1]

    out = logits(x)
    y = ((out - out[:n_train].mean(0)) / out[:n_train].std(0)).argmax(1).astype(np.int64)
    x = x.astype(np.float32)
    arrays = [x[:n_train], y[:n_train], x[n_train:], y[n_train:]]
    h = hashlib.sha256()
    for a in arrays:
        h.update(a.tobytes())
    source = f"teacher-student synthetic (alpha={alpha:g}, d_in={D_IN}, width={WIDTH}, seed={seed})"
    return ArrayData(*arrays, num_classes=CLASSES, source=source, sha256=h.hexdigest())


def _register(alpha: float) -> None:
    @DATASETS.register(f"teacher-a{alpha:g}", epochs=20, generated=True, images=False)
    def load(data_dir=None, download=False) -> ArrayData:
        return make_teacher_data(alpha)

    load.__doc__ = f"Teacher–student data with φ_α, α = {alpha:g} (``data_dir`` is not used)."


for _a in ALPHAS:
    _register(_a)
