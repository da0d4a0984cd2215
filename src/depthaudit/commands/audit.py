"""`depthaudit audit`, `intervene`, `probes` and `identity`: the audit protocol and its probes."""

import argparse
import sys
from pathlib import Path

import torch

from ..api import check_probe_fits
from ..errors import UsageError
from ..io import check_output_dir
from ..runner import fitted_probe_batches
from . import COMMANDS
from .args import (
    TRAINING_ONLY,
    add_train_args,
    audit_args,
    check_probe_args,
    config_from_args,
    dedup_note,
    hide_flags,
    out_arg,
    probe_args,
    remember_sweep,
    shallow_blocks,
    sweep_args,
    sweep_options,
)


def _audit_config(a: argparse.Namespace):
    from ..experiments.audit import AuditConfig
    from ..verdicts import Thresholds

    base = config_from_args(a)
    check_output_dir(a.out, subdirs=("runs",))
    nb, bs = check_probe_args(a)
    if a.track_every < 0 or not a.eps > 0 or not a.rho_max > 0:
        raise UsageError("--track-every must be >= 0, --eps and --rho-max > 0")
    if a.stop_on_flag and a.track_every != 1:
        raise UsageError("--stop-on-flag needs the monitor every epoch; drop --track-every or set it to 1")
    from ..methods import parse_method_spec

    for m in a.methods:  # parsed once by config_from_args: canonical labels (`fa:` is `fa`)
        parse_method_spec(m, base)
    if base.num_blocks < 1:
        raise UsageError("--num-blocks 0: the audit measures residual blocks; give at least 1")
    shallow = shallow_blocks(a, base.num_blocks)
    if getattr(a, "fresh_b_draws", None) is not None and not getattr(a, "functional", False):
        print("depthaudit: note: --fresh-b-draws has no effect without --functional", file=sys.stderr)
    draws = 20 if getattr(a, "fresh_b_draws", None) is None else a.fresh_b_draws
    dedup_note(a.methods, "--methods")
    dedup_note(a.seeds, "--seeds")
    return AuditConfig(base=base, methods=tuple(dict.fromkeys(a.methods)), seeds=tuple(dict.fromkeys(a.seeds)),
                       probe_batches=nb, probe_batch_size=bs, track_every=a.track_every,
                       thresholds=Thresholds(a.rho_max, a.eps, a.ref_factor, a.gap_min), d1_stat=a.d1_stat,
                       stop_on_flag=a.stop_on_flag, functional=getattr(a, "functional", False),
                       fresh_b_draws=draws, shallow_blocks=shallow)


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
    lambdas = [0.0, a.penalty] if a.penalty is not None else a.lambdas or [0.0, 1e-4, 1e-2, 1e-1]
    dedup_note(lambdas, "--lambdas")
    lambdas = list(dict.fromkeys(float(x) for x in lambdas))
    if any(not x >= 0 for x in lambdas):
        raise UsageError(f"--lambdas must be >= 0, got {lambdas}")
    out = Path(a.out)
    opts = sweep_options(a, out, acfg.base.device)
    if opts.cell is not None:
        opts = remember_sweep(opts, out, argv)
    res = api.intervene(acfg, out, lambdas, sweep=opts, argv=["depthaudit", *argv])
    print(res.card)
    print(f"\nwrote {out / 'intervention.md'}, {out / 'intervention.json'} and {out / 'intervention.png'}")
    return 0


def cmd_probes(a: argparse.Namespace, argv: list[str]) -> int:
    """Our probes for one method: the credit-mix α sweep and the BP warm start."""
    from ..data import load_data
    from ..experiments.probes import credit_mix_sweep, warm_start_probe
    from ..io import staged, write_json, write_text
    from ..methods import METHODS, parse_spec
    from ..report.probes import credit_mix_figure, credit_mix_md, warm_start_md
    from ..stores import claim_folder, still_owner

    name = parse_spec(a.method).name  # a spec (fa:head=exact) as every command takes it; unknown: one line now
    if METHODS.get(name).exact_credits:
        raise UsageError(f"--method {a.method}: its credits are already BP's, so mixing toward BP and a BP warm "
                         "start measure nothing; probe a method whose credit differs (e.g. fa, dfa)")
    dedup_note(a.alphas, "--alphas")
    a.alphas = list(dict.fromkeys(a.alphas))
    base = config_from_args(a)
    check_output_dir(a.out, subdirs=("warm_start",))
    if any(not 0 <= x <= 1 for x in a.alphas):
        raise UsageError("--alphas must lie in [0, 1]")
    data = load_data(base.dataset, base.data_dir, base.download, torch.device(base.device))
    check_probe_fits(a.probe_batch_size, data)
    out = Path(a.out)
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    seeds = tuple(dict.fromkeys(a.seeds))
    probe = check_probe_args(a)
    probe = (fitted_probe_batches(data, *probe), probe[1])
    opts = sweep_options(a, out, base.device)
    if opts.cell is not None:
        opts = remember_sweep(opts, out, argv)
    tag = a.method_spec.label.replace(":", "_").replace("=", "-").replace(",", "_")  # fa, fa_head-exact: file names
    ident = {k: v for k, v in base.identity_dict().items() if k not in ("seed", "device", "data_dir", "download")}
    ident = {**ident, "method": a.method_spec.label, "alphas": a.alphas, "seeds": list(seeds),
             "pre_epochs": a.pre_epochs, "probe": list(probe), "data_sha256": data.sha256}
    claim = None
    if not opts.list_cells and opts.cell is None and not opts.stored_only:  # this method's report in OUT belongs
        # to one configuration: claimed under the folder's lock before anything trains (another method's probes
        # sit beside it); --stored-only trains nothing and claims once every cell is found
        claim = claim_folder(out, "probes", ident, a.replace_report, name=f"probes_{tag}.identity.json")
    cb = credit_mix_sweep(base, a.method, a.alphas, seeds, out, data, data.sha256, probe, log=log,
                          argv=["depthaudit", *argv], opts=opts)
    parts = [f"# Probes (ours): {a.method_spec.label}, {base.dataset} {base.arch} d={base.d_hidden} "
             f"L={base.num_blocks}, {base.epochs} epochs, seeds {list(seeds)}", "", "## Credit mix (ours)", "",
             credit_mix_md(cb), "", f"![credit mix](credit_mix_{tag}.png)", ""]
    res = {"credit_mix": cb}
    if a.pre_epochs > 0:
        sb = warm_start_probe(base, a.method, a.pre_epochs, seeds, out, data, probe, log=log,
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
    nb, bs = check_probe_args(a)
    dedup_note(a.seeds, "--seeds")
    if a.out and Path(a.out).is_dir():
        raise UsageError(f"--out {a.out} is a folder; give a .json file path")
    if a.out:
        check_output_dir(Path(a.out).parent or Path("."))
    res = api.identity(base, a.seeds, probe_batches=nb, probe_batch_size=bs, out=a.out)
    print(res.card)
    return 0


def register(sub) -> None:
    """Add this module's subcommands to the CLI's subparsers (each with its own flags and ``func``)."""
    au = sub.add_parser("audit", help=COMMANDS["audit"][1],
                        description="Train each method (all blocks, tracked) and its frozen-blocks baseline; "
                        "report the standard pair beside D1 scale, D2 reference validity, D3 depth utility.")
    audit_args(au, "results/audit")
    au.add_argument("--replace-report", action="store_true",
                    help="overwrite OUT's report of a different audit configuration (runs are kept)")
    au.set_defaults(func=cmd_audit)

    iv = sub.add_parser("intervene", help=COMMANDS["intervene"][1],
                        description="Run the audit at every λ of --lambdas (the reference's grid and 30 epochs by "
                        "default); report D1/D2/D3, accuracy and per-layer cosines side by side, and a figure.")
    audit_args(iv, "results/intervene")
    iv.set_defaults(methods=["dfa"], epochs=30)
    iv.add_argument("--lambdas", nargs="+", type=float, default=None, metavar="λ",
                    help="λ grid of the penalty (default: the reference's 0 1e-4 1e-2 1e-1)")
    iv.add_argument("--penalty", type=float, default=None, metavar="X", help="shorthand for --lambdas 0 X")
    iv.set_defaults(func=cmd_intervene)

    br = sub.add_parser("probes", help=COMMANDS["probes"][1],
                        description="Ours, not the protocol's methods. Credit mix: train with (1-α)·method + α·BP "
                        "credit over --alphas. BP warm start (--pre-epochs > 0): BP first, then the method from there.")
    add_train_args(br, per_run=False)
    br.set_defaults(methods=None)
    br.add_argument("--method", default="dfa", help="the method to mix with BP (default: dfa)")
    br.add_argument("--alphas", nargs="+", type=float, default=[0.0, 0.25, 0.5, 0.75, 1.0], metavar="A",
                    help="α grid (default: 0 0.25 0.5 0.75 1)")
    br.add_argument("--pre-epochs", type=int, default=0, metavar="N", help="BP warm start: BP epochs first (0 = skip)")
    probe_args(br)
    out_arg(br, "results/probes")
    sweep_args(br, stacking=False)
    br.add_argument("--replace-report", action="store_true",
                    help="take over OUT's probes of this method made under another configuration (runs are kept)")
    hide_flags(br, {"methods"})  # probes take one --method
    br.set_defaults(func=cmd_probes)

    idt = sub.add_parser("identity", help=COMMANDS["identity"][1],
                         description="At random init: per-block |f_l(h)|/|h|, |h_L-h_0|/|h_0|, cos(h_L, h_0).")
    add_train_args(idt, per_run=False)
    hide_flags(idt, TRAINING_ONLY)  # the check is at initialisation: no training flag changes it
    probe_args(idt)
    out_arg(idt, None, "write the numbers to this JSON file")
    idt.set_defaults(func=cmd_identity)
