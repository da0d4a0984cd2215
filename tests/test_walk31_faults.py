"""Walk 31's wrong cases, each reproduced as the walker did it (docs/walks/walk31_*.txt)."""

import pytest

from depthaudit.data import DATASETS
from depthaudit.methods import METHODS
from depthaudit.methods.dfa import DFA
from depthaudit.models import MODELS


@pytest.mark.parametrize("reg", [METHODS, MODELS, DATASETS])
def test_a_name_too_long_for_a_file_name_is_refused_where_it_is_registered(reg):
    """W1 (cases 34–36): a 241-character method name was accepted; the audit claimed its folder, then failed on a
    run's file name ("File name too long; use a shorter path", which no --out could help), and its claim blocked
    the folder."""
    long = "m" + "x" * 240
    with pytest.raises(ValueError) as e:
        reg.register(long)(DFA)
    print(e.value)
    assert "is 241 characters long; use at most 64: it is part of every result's file name" in str(e.value)
    assert long not in reg
    ok = "m" + "x" * 63
    reg.register(ok)(type("W31", (DFA,), {}))
    try:
        assert ok in reg
    finally:
        reg._items.pop(ok, None)
        reg._meta.pop(ok, None)
