"""``depthaudit probes`` (ours): the toward-BP experiments of one method, as one config that resolves itself.

:class:`ProbesConfig` is what the CLI builds from its flags and what :func:`depthaudit.probes` takes (which runs
:mod:`.toward_bp`'s credit-mix α sweep and BP warm start, and writes the report).
"""

# imports inside functions: methods (torch) is imported where used: the CLI's parser reads this config
from dataclasses import dataclass

from ..config import TrainConfig
from ..fields import arg, probe_batch_size_field, probe_batches_field, refuse, seeds_field
from .resolve import resolve_sweep


@dataclass(frozen=True)
class ProbesConfig:
    """The probes of ``base.method`` (with its options): credit mix over ``alphas``, BP warm start over ``pre_epochs``.

    ``seeds`` are counted once and the base's seed is the first; a method whose credits are BP's own is refused
    (mixing toward BP would measure nothing).
    """

    base: TrainConfig
    alphas: tuple[float, ...] = arg((0.0, 0.25, 0.5, 0.75, 1.0), help="α grid", lo=0, hi=1, metavar="A")
    pre_epochs: int = arg(0, help="BP warm start: BP epochs first (0 = skip)", lo=0, metavar="N")
    seeds: tuple[int, ...] = seeds_field()
    probe_batches: int = probe_batches_field()
    probe_batch_size: int = probe_batch_size_field()

    def __post_init__(self):
        from ..methods import METHODS

        resolve_sweep(self, methods=False)  # types, ranges, seeds once (the base's seed the first), epochs >= 1
        alphas = tuple(sorted(set(self.alphas)))  # a grid: one order, so the same α in another order is the same
        # probes (walk 20 W6: "another probes, differs in alphas")
        if not alphas:
            raise refuse(self, "{alphas} is empty; give at least one α in [0, 1]")
        object.__setattr__(self, "alphas", alphas)
        if METHODS.get(self.base.method).exact_credits:
            raise refuse(self, f"{{method}} {self.label}: its credits are already BP's, so mixing toward BP and a BP "
                         "warm start measure nothing; run them on a method whose credit differs (e.g. fa, dfa)")

    @property
    def label(self) -> str:
        """The method's canonical spec (``fa``, ``fa:head=exact``): its row and file names."""
        return self.base.method_spec.label

    @property
    def tag(self) -> str:
        """The label in file names: ``fa``, ``fa_head-exact``."""
        return self.base.method_spec.tag

    def identity(self, probe_plan: tuple[int, int], data_sha256: str) -> dict:
        """What the folder's report of this method belongs to (not seed, device or where the data was read)."""
        base = self.base.identity_dict()
        ident = {k: v for k, v in base.items() if k not in ("seed", "device", "data_dir", "download")}
        return {**ident, "method": self.label, "alphas": list(self.alphas), "seeds": list(self.seeds),
                "pre_epochs": self.pre_epochs, "probe": list(probe_plan), "data_sha256": data_sha256}
