"""``depthaudit probes`` (ours): the toward-BP experiments of one method, as one config that resolves itself.

:class:`ProbesConfig` is what the CLI builds from its flags and what :func:`depthaudit.probes` takes; the runs are
:mod:`.toward_bp`'s (credit-mix α sweep, BP warm start).
"""

from dataclasses import dataclass
from pathlib import Path

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
        alphas = tuple(dict.fromkeys(self.alphas))
        if not alphas:
            raise refuse(self, "{alphas} is empty; give at least one α in [0, 1]")
        object.__setattr__(self, "alphas", alphas)
        if METHODS.get(self.base.method).exact_credits:
            raise refuse(self, f"{{method}} {self.label}: its credits are already BP's, so mixing toward BP and a BP "
                         "warm start measure nothing; run them on a method whose credit differs (e.g. fa, dfa)")

    @property
    def label(self) -> str:
        """The method's canonical spec (``fa``, ``fa:head=exact``): its row and file names."""
        from ..methods.specs import MethodSpec

        return MethodSpec(self.base.method, self.base.method_options.items()).label

    @property
    def tag(self) -> str:
        """The label in file names: ``fa``, ``fa_head-exact``."""
        return self.label.replace(":", "_").replace("=", "-").replace(",", "_")

    def identity(self, probe_plan: tuple[int, int], data_sha256: str) -> dict:
        """What the folder's report of this method belongs to (not seed, device or where the data was read)."""
        base = self.base.identity_dict()
        ident = {k: v for k, v in base.items() if k not in ("seed", "device", "data_dir", "download")}
        return {**ident, "method": self.label, "alphas": list(self.alphas), "seeds": list(self.seeds),
                "pre_epochs": self.pre_epochs, "probe": list(probe_plan), "data_sha256": data_sha256}


def run_probes(cfg: ProbesConfig, out: Path, data, opts, log, argv, replace_report: bool = False):
    """The probes into ``out``: ``(record, markdown)``, or the sweep's status when it stopped short (a cell)."""
    from ..io import staged, write_json, write_text
    from ..report.toward_bp import credit_mix_figure, credit_mix_md, warm_start_md
    from ..runner import fitted_probe_batches
    from ..stores import claim_folder, still_owner
    from ..sweep import SweepStatus
    from .toward_bp import bp_warm_start, credit_mix_sweep

    base, tag = cfg.base, cfg.tag
    probe_plan = (fitted_probe_batches(data, cfg.probe_batches, cfg.probe_batch_size), cfg.probe_batch_size)
    ident = cfg.identity(probe_plan, data.sha256)
    claim = None
    if not opts.list_cells and opts.cell is None and not opts.stored_only:  # this method's report in OUT belongs
        # to one configuration: claimed under the folder's lock before anything trains (another method's probes
        # sit beside it); --stored-only trains nothing and claims once every cell is found
        claim = claim_folder(out, "probes", ident, replace_report, name=f"probes_{tag}.identity.json")
    cb = credit_mix_sweep(base, base.method, list(cfg.alphas), cfg.seeds, out, data, data.sha256, probe_plan,
                          log=log, argv=argv, opts=opts)
    if isinstance(cb, SweepStatus):  # a cell listing or one cell: the sweep did what was asked
        return cb, None
    parts = [f"# Probes (ours): {cfg.label}, {base.dataset} {base.arch} d={base.d_hidden} "
             f"L={base.num_blocks}, {base.epochs} epochs, seeds {list(cfg.seeds)}", "", "## Credit mix (ours)", "",
             credit_mix_md(cb), "", f"![credit mix](credit_mix_{tag}.png)", ""]
    res = {"credit_mix": cb}
    if cfg.pre_epochs > 0:
        sb = bp_warm_start(base, base.method, cfg.pre_epochs, cfg.seeds, out, data, probe_plan, log=log, argv=argv)
        res["warm_start"] = sb
        parts += [f"## BP warm start (ours; BP for {cfg.pre_epochs} epochs, then {base.epochs} more)", "",
                  warm_start_md(sb), ""]
    if claim is None and opts.stored_only:
        claim = claim_folder(out, "probes", ident, replace_report, name=f"probes_{tag}.identity.json")
    with still_owner(out, claim), staged(out) as tmp:  # JSON, table and figure: all of them or none
        credit_mix_figure(cb, tmp / f"credit_mix_{tag}.png")
        write_json(tmp / f"probes_{tag}.json", res)
        write_text(tmp / f"probes_{tag}.md", "\n".join(parts))
    return res, "\n".join(parts)
