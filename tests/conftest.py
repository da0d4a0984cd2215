import pytest
import torch


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    # every test reads/writes decoded data under one session-wide temp cache, never ~/.cache
    monkeypatch.setenv("DEPTHAUDIT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
    # `--plugin` run in-process records its module for worker processes in DEPTHAUDIT_PLUGINS; restored after
    # each test, so a plug-in of one test (in its tmp folder) is never handed to another test's workers
    monkeypatch.setenv("DEPTHAUDIT_PLUGINS", "")


@pytest.fixture
def double():
    # law tests compare in float64 so "equal" means equal to ~1e-12
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)
