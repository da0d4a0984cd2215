"""Independent random streams from one run seed (init, feedback, shuffle, probe batches, …)."""
import hashlib


def derive_seed(seed: int, tag: str) -> int:
    """An independent 63-bit seed for one use of the run's seed (``"feedback"``, ``"shuffle"``, …).

    Model init uses ``seed`` itself; every other random stream is derived here so streams never
    share numbers (a feedback matrix must not repeat the embedding's weights).
    """
    return int.from_bytes(hashlib.sha256(f"{seed}:{tag}".encode()).digest()[:8], "little") >> 1
