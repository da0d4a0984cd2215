"""docs/pretrained-lm.md's recipe for the held-out windows, rebuilt by hand, is what load_text builds."""

import numpy as np
import torch

from depthaudit.data.text import load_text


def _by_hand(tokens: np.ndarray, context: int, bos):
    test = tokens[int(0.9 * len(tokens)):]  # step 3: the last 10 % is held out
    if bos is None:  # step 4: windows of context + 1, inputs the first context, targets the shift
        n = (len(test) - 1) // (context + 1)
        w = [test[i * (context + 1):(i + 1) * (context + 1)] for i in range(n)]
        return [x[:-1] for x in w], [x[1:] for x in w]
    n = len(test) // context  # with BOS: windows of context, input [BOS] + the first context - 1, targets all
    w = [test[i * context:(i + 1) * context] for i in range(n)]
    return [np.concatenate([[bos], x[:-1]]) for x in w], w


def test_the_documented_windows_are_the_ones_built():
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 50, 1000)
    for bos in (None, 49):
        data = load_text(None, 8, torch.device("cpu"), tokens=tokens, vocab=50, bos=bos)
        xs, ys = _by_hand(tokens, 8, bos)
        print(bos, len(xs), tuple(data.x_test.shape))
        assert data.x_test.shape[0] == len(xs)
        assert np.array_equal(data.x_test.numpy(), np.stack(xs)) and np.array_equal(data.y_test.numpy(), np.stack(ys))
