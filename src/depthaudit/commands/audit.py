"""`depthaudit audit`, `intervene`, `probes` (the toward-BP experiments) and `identity`."""

import argparse
import sys
from pathlib import Path

from .. import api
from ..config import TrainConfig
from ..errors import UsageError
from ..experiments.audit import AuditConfig
from ..experiments.intervene import InterveneConfig
from ..experiments.probes import ProbesConfig
from ..io import REPORT_FILES, check_output_dir, check_replaceable
from ..verdicts import Thresholds
from . import COMMANDS
from .args import (
    add_train_args,
    audit_args,
    building,
    config_from_args,
    dedup_note,
    out_arg,
    probe_sizes,
    remember_sweep,
    shallow_blocks,
    sweep_args,
    sweep_options,
)
from .parser import NONNEG_FLOAT, NONNEG_INT, add_fields, given, number


def _audit_config(a: argparse.Namespace):
    """The AuditConfig of the flags given (AuditConfig and Thresholds fill in every other default)."""
    a.methods = a.methods or list(AuditConfig.methods)
    a.seeds = a.seeds or list(AuditConfig.seeds)
    base = config_from_args(a)
    check_output_dir(a.out, subdirs=("runs",))
    if a.fresh_b_draws is not None and not a.functional:
        print("depthaudit: note: --fresh-b-draws has no effect without --functional", file=sys.stderr)
    dedup_note(a.seeds, "--seeds")
    if getattr(a, "track_every", None) and isinstance(base.epochs, int) and a.track_every > base.epochs >= 1:
        print(f"depthaudit: note: --track-every {a.track_every} is beyond the {base.epochs}-epoch budget: it measures "
              f"at init and at the end, as --track-every {base.epochs} does, and is recorded so", file=sys.stderr)
    with building(a):  # every rule is the config's own (the Python API builds the same one)
        return AuditConfig(base=base, **given(a, AuditConfig), thresholds=Thresholds(**given(a, Thresholds)),
                           shallow_blocks=shallow_blocks(a))


def cmd_audit(a: argparse.Namespace, argv: list[str]) -> int:
    """Run the audit protocol (:func:`depthaudit.audit`) and write report.md, report.json and figures."""
    acfg = _audit_config(a)
    out = Path(a.out)
    opts = sweep_options(a, out, acfg.base.device)  # bad sweep flags or cell id: one line, before any training
    if opts.cell is not None:
        opts = remember_sweep(opts, out, argv)
    res = api.audit(acfg, out, sweep=opts, replace_report=a.replace_report, argv=["depthaudit", *argv])
    print(res.card)
    if res.stopped:
        return 0
    drawn = {Path(f).name for f in res.figures}  # a figure with nothing measured to plot is not drawn: said
    missing = [f for f in REPORT_FILES if f.endswith(".png") and f not in drawn]  # (walk 27 case 116)
    why = (f" ({', '.join(missing)} not drawn: no run has a measurement to plot there, e.g. every run diverged)"
           if missing else "")
    print(f"\nwrote {out / 'report.md'}, {out / 'report.json'} and {len(res.figures)} figures{why}")
    return 0


def cmd_intervene(a: argparse.Namespace, argv: list[str]) -> int:
    """The audit over a grid of scale-penalty λ, side by side (:func:`depthaudit.intervene`)."""
    acfg = _audit_config(a)
    if a.lambdas is not None:
        dedup_note(a.lambdas, "--lambdas")
    if a.lambdas is not None and not any(a.lambdas):  # no λ > 0: no run has a penalty, so no form (walk 18 case 168)
        for flag, f, d in (("--penalty-form", "penalty_form", "abs"), ("--penalty-reduction", "penalty_reduction",
                                                                       "example")):
            if getattr(a, f, None) not in (None, d):
                print(f"depthaudit: note: {flag} {getattr(a, f)} has no effect: every λ of --lambdas is 0",
                      file=sys.stderr)
                setattr(a, f, d)
    with building(a):  # every rule is the config's own (the Python API builds the same one)
        icfg = InterveneConfig(audit=acfg, lambdas=a.lambdas, penalty=a.penalty,  # (the base has no penalty, so
                               penalty_form=a.penalty_form or "abs",  # it keeps no form: the grid's is given here)
                               penalty_reduction=a.penalty_reduction or "example")
    out = Path(a.out)
    opts = sweep_options(a, out, acfg.base.device)
    if opts.cell is not None:
        opts = remember_sweep(opts, out, argv)
    res = api.intervene(icfg, out, sweep=opts, argv=["depthaudit", *argv])
    print(res.card)
    if res.stopped:
        return 0
    print(f"\nwrote {out / 'intervention.md'}, {out / 'intervention.json'} and {out / 'intervention.png'}")
    return 0


def cmd_probes(a: argparse.Namespace, argv: list[str]) -> int:
    """The toward-BP experiments for one method (:func:`depthaudit.probes`): credit-mix α sweep, BP warm start."""
    dedup_note(a.alphas, "--alphas")
    if a.seeds:  # (walk 21 W5: a repeated seed was folded without the note the other sweeps print)
        dedup_note(a.seeds, "--seeds")
    a.seeds = a.seeds or list(AuditConfig.seeds)
    base = config_from_args(a)
    check_output_dir(a.out, subdirs=("warm_start",))
    with building(a):  # every rule is the config's own (the Python API builds the same one)
        cfg = ProbesConfig(base=base, alphas=tuple(a.alphas), pre_epochs=a.pre_epochs, seeds=tuple(a.seeds),
                           **given(a, AuditConfig, only=("probe_batches", "probe_batch_size")))
    out = Path(a.out)
    opts = sweep_options(a, out, base.device)
    if opts.cell is not None:
        opts = remember_sweep(opts, out, argv)
    res = api.probes(cfg, out, sweep=opts, replace_report=a.replace_report, argv=["depthaudit", *argv])
    print(res.card)
    return 0


def cmd_identity(a: argparse.Namespace, argv: list[str]) -> int:
    """Frozen-init identity check over seeds (:func:`depthaudit.identity`); JSON with ``--out``."""
    _idle_at_init(a)
    base = config_from_args(a)
    nb, bs = probe_sizes(a, AuditConfig)
    seeds = a.seeds or list(AuditConfig.seeds)
    dedup_note(seeds, "--seeds")
    if a.out and (Path(a.out).is_dir() or a.out.endswith(("/", "\\"))):  # (`newdir/` names a folder, not a file)
        raise UsageError(f"--out {a.out} is a folder; give a .json file path (e.g. "
                         f"{Path(a.out) / 'identity_check.json'})")
    if a.out:
        check_replaceable(Path(a.out), "--out")
        check_output_dir(Path(a.out).parent or Path("."))
    res = api.identity(base, seeds, probe_batches=nb, probe_batch_size=bs, out=a.out)
    print(res.card)
    return 0


def _idle_at_init(a: argparse.Namespace) -> None:
    """Say which flags given to ``identity`` change nothing: training's and the methods' (it measures at init).

    They are accepted (a command line shared with train or audit runs as is) but said, once (walk 15 case 39);
    the method-option flags are then cleared, so no second note names them.
    """
    from dataclasses import fields

    from ..fields import flag_name
    from .args import method_flag_values

    idle = [flag_name(f) for f in fields(TrainConfig)
            if f.metadata.get("training") and getattr(a, f.name, None) not in (None, False)]
    if getattr(a, "methods", None):  # (an audit's command line; walk 18 case 126: checked, then dropped unsaid)
        idle.append("--methods")
    for f in method_flag_values(a):
        idle.append(f"--{f}")
        setattr(a, f.replace("-", "_"), None)
    if idle:
        print(f"depthaudit: note: {', '.join(idle)} {'has' if len(idle) == 1 else 'have'} no effect with identity: it "
              "measures the model at initialisation (no method, no training)", file=sys.stderr)


def register(sub) -> None:
    """Add this module's subcommands to the CLI's subparsers (each with its own flags and ``func``)."""
    au = sub.add_parser("audit", help=COMMANDS["audit"][1],
                        description="Train each method (all blocks, tracked) and its frozen-blocks baseline; "
                        "report the standard pair beside D1 scale, D2 reference validity, D3 depth utility.")
    audit_args(au, "results/audit")
    au.add_argument("--replace-report", action="store_true",
                    help="overwrite OUT's report of a different audit configuration (runs are kept)", advanced=True)
    au.set_defaults(func=cmd_audit)

    iv = sub.add_parser("intervene", help=COMMANDS["intervene"][1],
                        description="Run the audit at every λ of --lambdas (the reference's grid and 30 epochs by "
                        "default); report D1/D2/D3, accuracy and per-layer cosines side by side, and a figure.")
    audit_args(iv, "results/intervene", defaults={"methods": ["dfa"], "epochs": 30})
    g = iv.group(None)
    g.add_argument("--lambdas", nargs="+", type=NONNEG_FLOAT, default=None, metavar="λ",
                   help="λ grid of the penalty (default: the reference's 0 1e-4 1e-2 1e-1)")
    g.add_argument("--penalty", type=NONNEG_FLOAT, default=None, metavar="X",
                   help="shorthand for --lambdas 0 X")
    iv.set_defaults(func=cmd_intervene)

    br = sub.add_parser("probes", help=COMMANDS["probes"][1],
                        description="Toward-BP experiments (ours, not the protocol's methods). Credit mix: train "
                        "with (1-α)·method + α·BP credit over --alphas. BP warm start (--pre-epochs > 0): BP first, "
                        "then the method from there.")
    add_fields(br, TrainConfig, skip={"train_blocks", "credit_mix", "warm_start", "seed"}, defaults={"method": "dfa"})
    add_fields(br, AuditConfig, only={"seeds", "probe_batches", "probe_batch_size"})
    g = br.group("probes")
    g.add_argument("--alphas", nargs="+", type=number(float, {"lo": 0, "hi": 1}), default=[0.0, 0.25, 0.5, 0.75, 1.0],
                   metavar="A", help="α grid")
    g.add_argument("--pre-epochs", type=NONNEG_INT, default=0, metavar="N",
                   help="BP warm start: BP epochs first (0 = skip)")
    out_arg(br, "results/probes")
    sweep_args(br, stacking=False)
    br.add_argument("--replace-report", action="store_true", advanced=True,
                    help="take over OUT's probes of this method made under another configuration (runs are kept)")
    br.set_defaults(func=cmd_probes)

    idt = sub.add_parser("identity", help=COMMANDS["identity"][1],
                         description="At random init: per-block |f_l(h)|/|h|, |h_L-h_0|/|h_0|, cos(h_L, h_0).")
    add_train_args(idt, per_run=False, training=False)  # at initialisation: no training flag changes it
    add_fields(idt, AuditConfig, only={"probe_batches", "probe_batch_size"})
    out_arg(idt, None, "write the numbers to this JSON file")
    idt.set_defaults(func=cmd_identity)
