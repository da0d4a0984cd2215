"""The rules every sweep config (audit, ladder, probes) owns, applied where the config is built.

Each front end (the CLI's flags, the Python API's keywords) only constructs the config; the config resolves its
defaults and refuses what cannot run here, in one line naming the field as the caller wrote it
(:class:`~depthaudit.errors.ConfigError`).
"""

# imports inside functions: methods (torch) is imported where used: the CLI's parser reads the configs that use this
from dataclasses import replace

from ..errors import ConfigError, UsageError
from ..fields import check_choices, check_ranges, check_seeds, check_types, refuse


def resolve_methods(methods) -> tuple:
    """Each entry parsed once into its canonical :class:`~depthaudit.methods.MethodSpec` (duplicates counted once)."""
    from ..methods import parse_spec

    if isinstance(methods, str):
        methods = (methods,)
    return tuple(dict.fromkeys(parse_spec(m) for m in methods))


def resolve_sweep(cfg, *, methods: bool = True) -> None:
    """``cfg`` (frozen, being built) in its resolved form, or a :class:`ConfigError`.

    Field types and ranges checked; ``methods`` parsed (and each row's options checked against ``base``),
    ``seeds`` counted once and the base's seed the first of them; ``base.epochs`` >= 1 (0 would make trained
    equal frozen); ``shallow_blocks`` < the base's blocks.
    """
    from ..methods import parse_method_spec

    if isinstance(getattr(cfg, "methods", None), str):
        object.__setattr__(cfg, "methods", (cfg.methods,))
    check_types(cfg)
    check_ranges(cfg)  # every field's declared range (the CLI's parser applies the same ones)
    check_choices(cfg, only=("d1_stat",))  # (walk 22: d1_stat="nope" ran, as "mean")
    check_seeds(cfg)
    base = cfg.base
    if base.epochs < 1:
        raise refuse(cfg, "{epochs} 0 trains nothing (trained would equal frozen); give {epochs} >= 1")
    default_seed = type(base).__dataclass_fields__["seed"].default
    # (walk 15 cases 259, 260: seed=5 became 42 silently). A base a sweep already seeded (its seed the first of
    # that sweep's seeds; dataclasses.replace(cfg, seeds=…) passes it on) is not the user's choice: not refused
    if not getattr(base, "_sweep_seeded", False) and base.seed != default_seed and base.seed not in cfg.seeds:
        raise refuse(cfg, f"the base config's seed {base.seed} is not what this sweep trains: each run's seed comes "
                     f"from {{seeds}} ({', '.join(map(str, cfg.seeds))}); give seeds=({base.seed},) (or seeds that "
                     f"include {base.seed}), or leave the base's seed at its default")
    if base.train_blocks != "all":  # each run's train_blocks is the sweep's (all/none, or the ladder's k)
        raise refuse(cfg, f"the base config's {{train_blocks}} {base.train_blocks!r} is not what this sweep trains: "
                     "each run's blocks come from the sweep (trained: all, frozen: none; a ladder's k; probes: "
                     "all); leave the base's train_blocks at its default ('all')")
    for name, what in (("credit_mix", "mixes BP into every run's credit"),
                       ("warm_start", "starts every run, the frozen baseline too, from those weights")):
        if getattr(base, name, None) is not None:  # train's own settings (walk 33 W3: a sweep's runs trained with
            raise refuse(cfg, f"the base config's {{{name}}} {getattr(base, name)!r} {what}, under the plain "  # them
                         f"method's name; it is train's alone (a probes sweep sets its own), so leave the base's "
                         f"{name} at None (for one such run: da.train)")
    base = replace(base, seed=cfg.seeds[0])  # a copy (the caller's own config is never marked)
    object.__setattr__(base, "_sweep_seeded", True)
    object.__setattr__(cfg, "base", base)
    if methods:
        if base.method != "bp" or base.method_options:
            raise refuse(cfg, f"the base config's method {str(base.method_spec)!r} is not what this sweep trains: "
                         "each row's method comes from {methods}; give methods=(" + repr(str(base.method_spec)) +
                         ",) and leave the base's method at its default (bp)")
        try:
            specs = resolve_methods(cfg.methods)
        except ConfigError:
            raise
        except UsageError as exc:  # an unknown method name: named by this caller's field (walk 18 case 56)
            raise refuse(cfg, f"{{methods}}: {exc}") from None
        if not specs:
            raise refuse(cfg, "{methods} is empty; give at least one credit method (e.g. bp)")
        given = list(cfg.methods) if len(specs) == len(cfg.methods) else list(specs)  # (quoted as typed: walk
        for m, typed in zip(specs, given, strict=True):  # 34 case 30 quoted gain=1e-400 as its parse, gain=0)
            try:  # each row's options checked now (by the run config), before any data loads
                parse_method_spec(m, cfg.base)
            except ConfigError as exc:  # named as this caller gave it: methods (--methods), not method_options
                raise exc.renamed("method_options", f"{{methods}} entry {str(typed)!r}") from None
        object.__setattr__(cfg, "methods", specs)
    k = getattr(cfg, "shallow_blocks", 0)
    if k and not 1 <= k < base.num_blocks:
        raise refuse(cfg, f"{{shallow_blocks}} {k}: the shallow baseline needs 1 <= blocks < {{num_blocks}} "
                     f"{base.num_blocks}" + ("; with one block there is no shallower model: drop the shallow "
                                            "baseline" if base.num_blocks == 1 else ""))
