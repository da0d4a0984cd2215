"""`depthaudit audit`, `intervene`, `probes` and `identity`: the audit protocol and its probes."""

import argparse
import sys
from pathlib import Path

import torch

from ..cli import check_probe_args, config_from_args
from ..errors import UsageError


def _audit_config(a: argparse.Namespace):
    from ..experiments.audit import AuditConfig
    from ..verdicts import Thresholds

    base = config_from_args(a)
    nb, bs = check_probe_args(a)
    if a.track_every < 0 or not a.eps > 0 or not a.rho_max > 0:
        raise UsageError("--track-every must be >= 0, --eps and --rho-max > 0")
    if a.stop_on_flag and a.track_every != 1:
        raise UsageError("--stop-on-flag needs the monitor every epoch; drop --track-every or set it to 1")
    from ..methods import parse_method_spec

    for m in a.methods:  # a misspelt method or option is one line here, before any training
        parse_method_spec(m, base)
    return AuditConfig(base=base, methods=tuple(dict.fromkeys(a.methods)), seeds=tuple(dict.fromkeys(a.seeds)),
                       probe_batches=nb, probe_batch_size=bs, track_every=a.track_every,
                       thresholds=Thresholds(a.rho_max, a.eps, a.ref_factor, a.gap_min), d1_stat=a.d1_stat,
                       stop_on_flag=a.stop_on_flag, functional=getattr(a, "functional", False),
                       fresh_b_draws=getattr(a, "fresh_b_draws", 20))


def cmd_audit(a: argparse.Namespace, argv: list[str]) -> int:
    """Run the audit protocol and write report.md, report.json and figures into ``--out``."""
    from ..data import load_data
    from ..experiments.audit import run_audit
    from ..io import write_json, write_text
    from ..report import audit_markdown, audit_terminal
    from ..report.figures import audit_figures

    acfg = _audit_config(a)
    base = acfg.base
    data = load_data(base.dataset, base.data_dir, base.download, torch.device(base.device))
    out = Path(a.out)
    print(f"depthaudit audit: {', '.join(acfg.methods)} × seeds {list(acfg.seeds)} on {base.dataset} "
          f"{base.arch} d={base.d_hidden} L={base.num_blocks}, {base.epochs} epochs, {base.device} → {out}",
          file=sys.stderr)
    report = run_audit(acfg, data, out, log=lambda m: print(m, file=sys.stderr, flush=True),
                       argv=["depthaudit", *argv], jobs=a.jobs)
    figures = audit_figures(report, out)
    report["figures"] = figures
    write_json(out / "report.json", report)
    write_text(out / "report.md", audit_markdown(report, figures))
    print(audit_terminal(report))
    print(f"\nwrote {out / 'report.md'}, {out / 'report.json'} and {len(figures)} figures")
    return 0


def cmd_intervene(a: argparse.Namespace, argv: list[str]) -> int:
    """The audit over a grid of scale-penalty λ, side by side (table, JSON, figure)."""
    from ..data import load_data
    from ..experiments.intervene import run_intervention
    from ..io import write_json, write_text
    from ..report.probes import intervention_figure, intervention_md

    acfg = _audit_config(a)
    lambdas = [0.0, a.penalty] if a.penalty is not None else a.lambdas
    lambdas = list(dict.fromkeys(float(x) for x in lambdas))
    if any(not x >= 0 for x in lambdas):
        raise UsageError(f"--lambdas must be >= 0, got {lambdas}")
    data = load_data(acfg.base.dataset, acfg.base.data_dir, acfg.base.download, torch.device(acfg.base.device))
    out = Path(a.out)
    res = run_intervention(acfg, lambdas, data, out, log=lambda m: print(m, file=sys.stderr, flush=True),
                           argv=["depthaudit", *argv], jobs=a.jobs)
    table = intervention_md(res)
    intervention_figure(res, out / "intervention.png")
    write_json(out / "intervention.json", res)
    b = acfg.base
    write_text(out / "intervention.md", f"# Scale-penalty intervention ({b.penalty_form} form, λ ∈ "
               f"{', '.join(f'{x:g}' for x in lambdas)}; {b.dataset} {b.arch} d={b.d_hidden} L={b.num_blocks}, "
               f"{b.epochs} epochs)\n\n{table}\n\n![checks vs λ](intervention.png)\n")
    print(table)
    print(f"\nwrote {out / 'intervention.md'}, {out / 'intervention.json'} and {out / 'intervention.png'}")
    return 0


def cmd_probes(a: argparse.Namespace, argv: list[str]) -> int:
    """Our probes for one method: the credit-mix α sweep and the BP warm start."""
    from ..data import load_data
    from ..experiments.probes import credit_mix_sweep, warm_start_probe
    from ..io import write_json, write_text
    from ..report.probes import credit_mix_figure, credit_mix_md, warm_start_md

    base = config_from_args(a)
    if any(not 0 <= x <= 1 for x in a.alphas):
        raise UsageError("--alphas must lie in [0, 1]")
    data = load_data(base.dataset, base.data_dir, base.download, torch.device(base.device))
    out = Path(a.out)
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    seeds = tuple(dict.fromkeys(a.seeds))
    probe = check_probe_args(a)
    cb = credit_mix_sweep(base, a.method, a.alphas, seeds, out, data, data.sha256, probe, jobs=a.jobs, log=log,
                       argv=["depthaudit", *argv])
    credit_mix_figure(cb, out / f"credit_mix_{a.method}.png")
    parts = [f"# Probes (ours): {a.method}, {base.dataset} {base.arch} d={base.d_hidden} L={base.num_blocks}, "
             f"{base.epochs} epochs, seeds {list(seeds)}", "", "## Credit mix (ours)", "", credit_mix_md(cb), "",
             f"![credit mix](credit_mix_{a.method}.png)", ""]
    res = {"credit_mix": cb}
    if a.pre_epochs > 0:
        sb = warm_start_probe(base, a.method, a.pre_epochs, seeds, out, data, probe, log=log,
                          argv=["depthaudit", *argv])
        res["warm_start"] = sb
        parts += [f"## BP warm start (ours; BP for {a.pre_epochs} epochs, then {base.epochs} more)", "",
                  warm_start_md(sb), ""]
    write_json(out / f"probes_{a.method}.json", res)
    write_text(out / f"probes_{a.method}.md", "\n".join(parts))
    print("\n".join(parts))
    return 0


def cmd_identity(a: argparse.Namespace, argv: list[str]) -> int:
    """Frozen-init identity check over seeds; prints a table beside SPEC §1's calibration, JSON with ``--out``."""
    from ..data import load_data
    from ..diagnostics.identity import identity_over_seeds
    from ..experiments.audit import identity_summary
    from ..io import write_json
    from ..report import fmt_ms
    from ..runner import probe_batch

    base = config_from_args(a)
    nb, bs = check_probe_args(a)
    if a.out and Path(a.out).is_dir():
        raise UsageError(f"--out {a.out} is a folder; give a .json file path")
    data = load_data(base.dataset, base.data_dir, base.download, torch.device(base.device))
    seeds = list(dict.fromkeys(a.seeds))
    x, y = probe_batch(data, seeds[0], nb * bs)
    res = identity_over_seeds(base, data.input_shape, data.num_classes, seeds, x, y, bs)
    summ = identity_summary(res["per_seed"], base.num_blocks)
    ref = base.arch == "resmlp" and base.variant == "ref" and base.dataset == "cifar10"
    rows = [(f"block {i + 1}: |f_l(h_(l-1))|/|h_(l-1)|", v, "~0.10") for i, v in enumerate(summ["block_ratio"])]
    rows += [("stack: |h_L - h_0|/|h_0|", summ["stack_rel_change"], "0.196 ± 0.003"),
             ("stack: cos(h_L, h_0)", summ["stack_cos"], "0.981 ± 0.001")]
    rows += [("per example, mean: |h_L - h_0|/|h_0| (ours)", summ["per_example_stack_rel_change"], ""),
             ("per example, mean: cos(h_L, h_0) (ours)", summ["per_example_stack_cos"], "")]
    rows += [(f"median per-example |h_{i}|", v, "~9") for i, v in enumerate(summ["stream_median_norm"])]
    if "g_L_median" in summ:
        rows.append((f"D2 |g_L| (mean loss, batch {bs}), median", summ["g_L_median"], "~8e-3"))
    print(f"identity at init: {base.arch} ({base.variant}) d={base.d_hidden} L={base.num_blocks}, {base.dataset}, "
          f"{x.shape[0]} held-out examples, seeds {seeds}")
    print("  block and stack ratios over the whole held-out tensor (the calibration's form); per-example means below")
    print(f"  {'quantity':44s} {'measured (mean ± std over seeds)':34s}" + (" SPEC §1 reference" if ref else ""))
    for name, ms, spec in rows:
        fmt = ".2e" if name.startswith("D2") else ".4f"
        print(f"  {name:44s} {fmt_ms(ms, fmt):34s}" + (f" {spec}" if ref else ""))
    if a.out:
        write_json(Path(a.out), {"config": base.to_dict(), **res, "summary": summ})
    return 0
