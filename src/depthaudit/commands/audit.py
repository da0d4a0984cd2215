"""`depthaudit audit`, `intervene`, `probes` (the toward-BP experiments) and `identity`."""

import argparse
import sys
from pathlib import Path

import torch

from ..api import check_probe_fits
from ..config import TrainConfig
from ..errors import UsageError
from ..experiments.audit import AuditConfig
from ..io import check_output_dir
from ..runner import fitted_probe_batches
from . import COMMANDS
from .args import (
    add_train_args,
    audit_args,
    config_from_args,
    dedup_note,
    out_arg,
    probe_sizes,
    remember_sweep,
    shallow_blocks,
    stopped,
    sweep_args,
    sweep_options,
)
from .parser import NONNEG_FLOAT, NONNEG_INT, add_fields, given, number


def _audit_config(a: argparse.Namespace):
    """The AuditConfig of the flags given (AuditConfig and Thresholds fill in every other default)."""
    from ..verdicts import Thresholds

    a.methods = a.methods or list(AuditConfig.methods)
    a.seeds = a.seeds or list(AuditConfig.seeds)
    base = config_from_args(a)
    check_output_dir(a.out, subdirs=("runs",))
    if a.stop_on_flag and a.track_every not in (None, 1):
        raise UsageError("--stop-on-flag needs the monitor every epoch; drop --track-every or set it to 1")
    if base.num_blocks < 1:
        raise UsageError("--num-blocks 0: the audit measures residual blocks; give at least 1")
    shallow = shallow_blocks(a, base.num_blocks)
    if a.fresh_b_draws is not None and not a.functional:
        print("depthaudit: note: --fresh-b-draws has no effect without --functional", file=sys.stderr)
    dedup_note(a.seeds, "--seeds")
    return AuditConfig(base=base, **given(a, AuditConfig), thresholds=Thresholds(**given(a, Thresholds)),
                       shallow_blocks=shallow)


def cmd_audit(a: argparse.Namespace, argv: list[str]) -> int:
    """Run the audit protocol (:func:`depthaudit.audit`) and write report.md, report.json and figures."""
    from .. import api

    acfg = _audit_config(a)
    out = Path(a.out)
    api.same_audit(out, acfg, a.replace_report)
    opts = sweep_options(a, out, acfg.base.device)  # bad sweep flags or cell id: one line, before any training
    if opts.cell is not None:
        opts = remember_sweep(opts, out, argv)
    res = api.audit(acfg, out, sweep=opts, replace_report=a.replace_report, argv=["depthaudit", *argv])
    print(res.card)
    if res.stopped:
        return 0
    print(f"\nwrote {out / 'report.md'}, {out / 'report.json'} and {len(res.figures)} figures")
    return 0


def cmd_intervene(a: argparse.Namespace, argv: list[str]) -> int:
    """The audit over a grid of scale-penalty λ, side by side (:func:`depthaudit.intervene`)."""
    from .. import api

    if a.penalty is not None and a.lambdas is not None:
        raise UsageError(f"--penalty {a.penalty} is shorthand for --lambdas 0 {a.penalty}; give one of them")
    if a.scale_penalty:
        raise UsageError("intervene sets λ from --lambdas (or --penalty); drop --scale-penalty")
    acfg = _audit_config(a)
    lambdas = [0.0, a.penalty] if a.penalty is not None else a.lambdas
    if lambdas is not None:
        dedup_note(lambdas, "--lambdas")
    out = Path(a.out)
    opts = sweep_options(a, out, acfg.base.device)
    if opts.cell is not None:
        opts = remember_sweep(opts, out, argv)
    grid = {} if lambdas is None else {"lambdas": lambdas}  # not given: the reference's grid (api.intervene)
    res = api.intervene(acfg, out, sweep=opts, argv=["depthaudit", *argv], **grid)
    print(res.card)
    if res.stopped:
        return 0
    print(f"\nwrote {out / 'intervention.md'}, {out / 'intervention.json'} and {out / 'intervention.png'}")
    return 0


def cmd_probes(a: argparse.Namespace, argv: list[str]) -> int:
    """The toward-BP experiments for one method (command name ``probes``): credit-mix α sweep, BP warm start."""
    from ..data import load_data
    from ..experiments.toward_bp import bp_warm_start, credit_mix_sweep
    from ..io import staged, write_json, write_text
    from ..methods import METHODS, parse_spec
    from ..report.toward_bp import credit_mix_figure, credit_mix_md, warm_start_md
    from ..stores import claim_folder, still_owner
    from ..sweep import SweepStatus

    name = parse_spec(a.method).name  # a spec (fa:head=exact) as every command takes it; unknown: one line now
    if METHODS.get(name).exact_credits:
        raise UsageError(f"--method {a.method}: its credits are already BP's, so mixing toward BP and a BP warm "
                         "start measure nothing; run them on a method whose credit differs (e.g. fa, dfa)")
    dedup_note(a.alphas, "--alphas")
    a.alphas = list(dict.fromkeys(a.alphas))
    a.seeds = a.seeds or list(AuditConfig.seeds)
    base = config_from_args(a)
    check_output_dir(a.out, subdirs=("warm_start",))
    data = load_data(base.dataset, base.data_dir, base.download, torch.device(base.device))
    nb, bs = probe_sizes(a, AuditConfig)
    check_probe_fits(bs, data)
    out = Path(a.out)
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    seeds = tuple(dict.fromkeys(a.seeds))
    probe_plan = (fitted_probe_batches(data, nb, bs), bs)
    opts = sweep_options(a, out, base.device)
    if opts.cell is not None:
        opts = remember_sweep(opts, out, argv)
    tag = a.method_spec.label.replace(":", "_").replace("=", "-").replace(",", "_")  # fa, fa_head-exact: file names
    ident = {k: v for k, v in base.identity_dict().items() if k not in ("seed", "device", "data_dir", "download")}
    ident = {**ident, "method": a.method_spec.label, "alphas": a.alphas, "seeds": list(seeds),
             "pre_epochs": a.pre_epochs, "probe": list(probe_plan), "data_sha256": data.sha256}
    claim = None
    if not opts.list_cells and opts.cell is None and not opts.stored_only:  # this method's report in OUT belongs
        # to one configuration: claimed under the folder's lock before anything trains (another method's probes
        # sit beside it); --stored-only trains nothing and claims once every cell is found
        claim = claim_folder(out, "probes", ident, a.replace_report, name=f"probes_{tag}.identity.json")
    cb = credit_mix_sweep(base, a.method, a.alphas, seeds, out, data, data.sha256, probe_plan, log=log,
                          argv=["depthaudit", *argv], opts=opts)
    if isinstance(cb, SweepStatus):  # a cell listing or one cell: the sweep did what was asked
        return stopped(cb)
    parts = [f"# Probes (ours): {a.method_spec.label}, {base.dataset} {base.arch} d={base.d_hidden} "
             f"L={base.num_blocks}, {base.epochs} epochs, seeds {list(seeds)}", "", "## Credit mix (ours)", "",
             credit_mix_md(cb), "", f"![credit mix](credit_mix_{tag}.png)", ""]
    res = {"credit_mix": cb}
    if a.pre_epochs > 0:
        sb = bp_warm_start(base, a.method, a.pre_epochs, seeds, out, data, probe_plan, log=log,
                              argv=["depthaudit", *argv])
        res["warm_start"] = sb
        parts += [f"## BP warm start (ours; BP for {a.pre_epochs} epochs, then {base.epochs} more)", "",
                  warm_start_md(sb), ""]
    if claim is None and opts.stored_only:
        claim = claim_folder(out, "probes", ident, a.replace_report, name=f"probes_{tag}.identity.json")
    with still_owner(out, claim), staged(out) as tmp:  # JSON, table and figure: all of them or none
        credit_mix_figure(cb, tmp / f"credit_mix_{tag}.png")
        write_json(tmp / f"probes_{tag}.json", res)
        write_text(tmp / f"probes_{tag}.md", "\n".join(parts))
    print("\n".join(parts))
    return 0


def cmd_identity(a: argparse.Namespace, argv: list[str]) -> int:
    """Frozen-init identity check over seeds (:func:`depthaudit.identity`); JSON with ``--out``."""
    from .. import api

    base = config_from_args(a)
    nb, bs = probe_sizes(a, AuditConfig)
    seeds = a.seeds or list(AuditConfig.seeds)
    dedup_note(seeds, "--seeds")
    if a.out and Path(a.out).is_dir():
        raise UsageError(f"--out {a.out} is a folder; give a .json file path")
    if a.out:
        from ..io import check_replaceable

        check_replaceable(Path(a.out), "--out")
        check_output_dir(Path(a.out).parent or Path("."))
    res = api.identity(base, seeds, probe_batches=nb, probe_batch_size=bs, out=a.out)
    print(res.card)
    return 0


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
