"""Depth-utility ladder (SPEC §3): for k = 0..L train only the last k blocks; aggregate over seeds.

k = 0 is exactly the audit's frozen-blocks baseline config (``train_blocks="none"``) and k = L exactly
its full config (``"all"``); 0 < k < L use ``"last:k"``.
"""

from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from ..config import LEGACY, TrainConfig
from ..diagnostics import MEASUREMENT_KEY, CreditCosine, ReferenceNorm, StreamNorms
from ..errors import UsageError
from ..fields import arg, methods_field, probe_batch_size_field, probe_batches_field, refuse, seeds_field
from ..methods import parse_method_spec
from ..runner import tracking_plan
from ..stores import EXPECTED, STORE_NAME
from ..sweep import FileStore, RunSpec
from ..verdicts import Thresholds, accuracy_gap_pp, mean_std
from .resolve import resolve_sweep
from .shallow import matched_shallow, shallow_config

SCHEMA = "depthaudit.ladder.v1"


@dataclass(frozen=True)
class LadderConfig:
    """Base config plus the grid: methods × k × seeds; the final state is measured on a probe batch."""

    base: TrainConfig
    methods: tuple[str, ...] = methods_field()
    k_values: tuple[int, ...] | None = arg(None, help="rungs k", lo=0, flag="k_values", aliases=("--k-values",),
                                    metavar="K", group="ladder", default_text="0..num_blocks")
    seeds: tuple[int, ...] = seeds_field((42, 123, 456))
    probe_batches: int = probe_batches_field()
    probe_batch_size: int = probe_batch_size_field()
    eps: float = 1e-8
    d1_stat: str = "median"
    shallow_blocks: int = 0  # > 0: also the parameter-matched shallow model per method and seed (ours)

    def __post_init__(self):
        resolve_sweep(self)  # types, ranges, methods parsed and checked, seeds once (the base's seed the first), ...
        if self.d1_stat not in ("median", "mean"):  # (an undeclared field: checked here, as the audit's d1_stat)
            raise refuse(self, f"{{d1_stat}} {self.d1_stat!r} not known; use one of median, mean")
        n = self.base.num_blocks
        ks = tuple(range(n + 1)) if self.k_values is None else tuple(dict.fromkeys(self.k_values))
        bad = [k for k in ks if not 0 <= k <= n]
        if not ks:
            raise refuse(self, f"{{k_values}} is empty; give rungs in 0..{n}")
        if bad:
            raise refuse(self, f"{{k_values}} {' '.join(map(str, bad))}: each k must be in 0..{n} ({{num_blocks}})")
        object.__setattr__(self, "k_values", ks)

    def to_dict(self) -> dict:
        """JSON-able."""
        d = asdict(self)
        for k in ("methods", "k_values", "seeds"):
            d[k] = list(d[k])
        return d


def blocks_for(k: int, num_blocks: int) -> str:
    """The ``train_blocks`` spelling for rung k."""
    return "none" if k == 0 else "all" if k == num_blocks else f"last:{k}"


def ladder_specs(lc: LadderConfig, data=None) -> list[RunSpec]:
    """One spec per (method, k, seed), keyed ``method/k{k}/s{seed}``.

    With ``lc.shallow_blocks`` (and ``data``, whose shape sets the parameter count) also the matched
    shallow model per method and seed, keyed ``method/shallow/s{seed}``.
    """
    # final-state audit measurements (every = 0: no per-epoch tracking, so no monitor)
    tracking = tracking_plan(lc.probe_batches, lc.probe_batch_size, 0, Thresholds(eps=lc.eps), lc.d1_stat)
    specs = [RunSpec(f"{m}/k{k}/s{s}", replace(parse_method_spec(m, lc.base)[1], seed=s,
                                                train_blocks=blocks_for(k, lc.base.num_blocks)), tracking)
             for m in lc.methods for k in lc.k_values for s in lc.seeds]
    if lc.shallow_blocks and data is not None:
        match = matched_shallow(lc.base, data.input_shape, data.num_classes, lc.shallow_blocks)
        specs += [RunSpec(f"{m}/shallow/s{s}", shallow_config(replace(parse_method_spec(m, lc.base)[1], seed=s),
                                                               match)) for m in lc.methods for s in lc.seeds]
    return specs


def ladder_filename(base: TrainConfig) -> str:
    """``ladder_d{d}_L{L}_{dataset}.json`` (the seed harness's name)."""
    return f"ladder_d{base.d_hidden}_L{base.num_blocks}_{base.dataset}.json"


def ladder_identity(base: TrainConfig, data_sha256: str, probe_plan: tuple[int, int], eps: float) -> dict:
    """What every run in one ladder file shares: the recipe and model (not method/k/seed/device/path)."""
    d = base.identity_dict()
    for k in ("method", "seed", "train_blocks", "device", "data_dir", "download", "method_options"):
        d.pop(k, None)
    n_batches, batch_size = probe_plan
    return {**d, "data_sha256": data_sha256, "probe_batches": n_batches, "probe_batch_size": batch_size, "eps": eps}


def open_store(out_dir: Path, lc: LadderConfig, data_sha256: str) -> FileStore:
    """The ladder's results file (refusing one written under a different configuration)."""
    return FileStore(Path(out_dir) / ladder_filename(lc.base), SCHEMA,
                     ladder_identity(lc.base, data_sha256, (lc.probe_batches, lc.probe_batch_size), lc.eps),
                     defaults={**TrainConfig().identity_dict(), **LEGACY})


def placed_in_ladder(identity: dict, key: str, config: dict) -> str | None:
    """Why a run stored under ``key`` (``method/k{k}/s{seed}``) in a ladder of ``identity`` is not that run; else None.

    What the key and the ladder's identity say (method and options, blocks trained, seed, the whole recipe) is what
    the record's config must hold: a record swapped with another rung's, or copied from a ladder of another ``lr``,
    is caught here even where it predates the record's own note of its place (:data:`~depthaudit.stores.STORED_IN`).
    """
    parts = key.split("/")
    if len(parts) != 3 or not parts[2][1:].lstrip("-").isdigit() or not (parts[1] == "shallow"
                                                                           or parts[1][1:].isdigit()):
        return None  # not a rung's key: the ladder file's own check names it
    names = {f.name for f in fields(TrainConfig)}
    try:
        base = TrainConfig.from_dict({k: v for k, v in identity.items() if k in names})
        want = replace(parse_method_spec(parts[0], base)[1], seed=int(parts[2][1:]))
        got = TrainConfig.from_dict(config)
    except (TypeError, ValueError, KeyError, UsageError):
        return None  # a method or dataset this session does not know (a plug-in's): nothing to compare against
    skip = {"data_dir", "download", "device"}
    if parts[1] == "shallow":  # the matched shallow model: its own shape, every block trained
        skip |= {"num_blocks", "d_hidden", "train_blocks"}
    else:
        want = replace(want, train_blocks=blocks_for(int(parts[1][1:]), base.num_blocks))
    diff = [f for f in sorted(names - skip) if getattr(want, f) != getattr(got, f)]
    if diff:
        return f"holds a run of another configuration than its place {key!r} says (differs in: {', '.join(diff[:6])})"
    return None


EXPECTED[SCHEMA] = placed_in_ladder
STORE_NAME[SCHEMA] = lambda ident: ladder_filename(TrainConfig.from_dict(ident))  # (its records name their file)


def _final_measurement(rec: dict) -> dict:
    for h in reversed(rec.get("history", [])):
        if MEASUREMENT_KEY in h:
            return h[MEASUREMENT_KEY]
    return {}


def aggregate(doc: dict) -> dict:
    """From a ladder file's ``runs``: per (method, k) accuracy mean ± std (ddof 1) and n, plus helpers.

    Methods come in the file's order (by name): a ladder file gathers the methods of every command that wrote
    it, so the ladder command and ``depthaudit report`` render one table (walk 29: the command's ``--methods``
    order was undone by the next report).
    """
    cells: dict[str, dict[int, list]] = {}
    extra: dict[str, dict[int, dict[str, list]]] = {}
    L = doc["identity"]["num_blocks"]
    shallow: dict[str, list] = {}
    for key, rec in doc["runs"].items():
        m, k, _ = key.split("/")
        if k == "shallow":  # the parameter-matched shallow model (ours), beside the rungs
            shallow.setdefault(m, []).append(rec)
            continue
        k = int(k[1:])
        # a diverged run is reported as such (counted per cell), never averaged into the accuracy
        cells.setdefault(m, {}).setdefault(k, []).append(None if rec["status"] == "diverged"
                                                         else rec["final"]["test_acc"])
        p = _final_measurement(rec)
        e = extra.setdefault(m, {}).setdefault(k, {"rho": [], "g_L": [], "cos_mean": [], "diverged": []})
        e["rho"].append(StreamNorms.read(p).get("rho"))
        e["g_L"].append(ReferenceNorm.read(p).get("g_L"))
        e["cos_mean"].append(CreditCosine.read(p).get("mean_per_layer"))
        e["diverged"].append(rec["status"] == "diverged")
    table = {m: {k: {**mean_std(v), "diverged": sum(x is None for x in v)} for k, v in sorted(ks.items())}
             for m, ks in cells.items()}
    helpers = {}
    for m, ks in table.items():
        means = [(k, c["mean"]) for k, c in ks.items() if c["mean"] is not None]
        h = {"max_rung": max(means, key=lambda kv: kv[1])[0] if means else None,
             "monotone": all(b >= a for (_, a), (_, b) in zip(means, means[1:], strict=False))
             if len(means) > 1 else None}  # one rung alone says nothing of the trend
        if 0 in ks and L in ks and ks[0]["mean"] is not None and ks[L]["mean"] is not None:
            h["gain_pp_k0_to_kL"] = accuracy_gap_pp(ks[L]["mean"], ks[0]["mean"])  # (as D3: 1.35, not 1.3499…)
        else:
            h["gain_pp_k0_to_kL"] = None
        helpers[m] = h
    measures = {m: {k: {q: mean_std(v) if q != "diverged" else sum(v) for q, v in e.items()}
                    for k, e in sorted(ks.items())} for m, ks in extra.items()}
    out = {"num_blocks": L, "table": table, "helpers": helpers, "measures": measures}
    if shallow:
        out["shallow"] = {m: {**mean_std([r["final"]["test_acc"] for r in recs if r["status"] != "diverged"]),
                              "diverged": sum(r["status"] == "diverged" for r in recs),
                              "num_blocks": recs[0]["config"]["num_blocks"], "d_hidden": recs[0]["config"]["d_hidden"]}
                          for m, recs in shallow.items()}
    return out
