"""MNIST-1D, generated locally by the ``mnist1d`` package: the embedded default (no download).

Fixed here: the package's default generation arguments except ``num_samples = 10_000`` (so the test
split has 2,000 examples and a 2 pp accuracy gap is resolvable), ``seed = 42`` and
``train_split = 0.8`` → 8,000 train / 2,000 test sequences of length 40, 10 classes.
"""

# imports inside functions: the mnist1d package (scipy, requests) only when the data is generated (cost)
import hashlib

import numpy as np

from .base import DATASETS, ArrayData, cached_arrays

NUM_SAMPLES = 10_000
SEED = 42


def _generate() -> ArrayData:
    import mnist1d
    from mnist1d.data import get_dataset_args, make_dataset

    args = get_dataset_args()
    args.num_samples, args.seed, args.train_split = NUM_SAMPLES, SEED, 0.8
    d = make_dataset(args)
    arrays = [d["x"].astype(np.float32), d["y"].astype(np.int64),
              d["x_test"].astype(np.float32), d["y_test"].astype(np.int64)]
    h = hashlib.sha256()
    for a in arrays:
        h.update(a.tobytes())
    version = getattr(mnist1d, "__version__", "")
    source = f"mnist1d package {version} make_dataset(num_samples={NUM_SAMPLES}, seed={SEED})".replace("  ", " ")
    return ArrayData(*arrays, num_classes=10, source=source, sha256=h.hexdigest())


@DATASETS.register("mnist1d", epochs=20, generated=True, images=False)
def load_mnist1d(data_dir=None, download=False) -> ArrayData:
    """Generate (or read from the cache) the fixed MNIST-1D split; ``data_dir`` is not used."""
    return cached_arrays(f"mnist1d-n{NUM_SAMPLES}-s{SEED}", _generate)
