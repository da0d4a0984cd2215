"""The field table (issue 37): every registered method under both optimizers at one budget, from stored audits.

Only audits of the reference ResMLP (d = 256, L = 4) at the budget count.
Each audit folder named on the command line (its ``report.json``) gives one row per method row it holds, keyed by
(method label, optimizer); every registered method gets a row under ``adamw`` and ``sgd`` whether or not it was
trained, and a cell no stored audit holds at the budget says "not trained" — the table never hides a gap. Run::

    python -m depthaudit.report.field OUT.md DIR [DIR ...] [--epochs 100] [--dataset cifar10]

It writes the Markdown (and OUT.png: each trained cell's accuracy beside its frozen twin's, coloured by verdict)
atomically and prints it. Columns: test accuracy and the frozen twin's, the D3 gap, the
headline Γ (mean over layers), the weight angle ∠(W, Bᵀ) (mean over blocks, methods with per-weight feedback), the
last block's CKA to the audit's BP twin, D1/D2/D3 with their values, Table 1's published accuracy where it has one,
and the peer benchmark's (biotorch, ResNet-20: another model, for context) under the row's optimizer.
"""

# imports inside functions: matplotlib only when the figure is drawn (import cost)
import json
import os
import sys
from pathlib import Path

from ..errors import UsageError
from ..io import environment_error, our_png, save_figure, staged, write_text
from ..methods import METHODS
from ..verdicts import fmt_num
from .published_audit import TABLE1

OPTIMIZERS = ("adamw", "sgd")
# The peer benchmark's figures beside each row (another model, so context, not a reproduction): biotorch's
# Benchmarks.md (jsalbert/biotorch), CIFAR-10 ResNet-20 top-1 *error* % under SGD and under Adam, 45k/5k split,
# best-validation model. Test accuracy = 1 - error / 100.
BIOTORCH_RESNET20: dict[tuple[str, str], float] = {
    ("bp", "sgd"): 8.63, ("bp", "adamw"): 10.01, ("fa", "sgd"): 32.16, ("fa", "adamw"): 29.59,
    ("dfa", "sgd"): 45.94, ("dfa", "adamw"): 32.16, ("usf", "sgd"): 10.05, ("usf", "adamw"): 10.59,
    ("brsf", "sgd"): 11.02, ("brsf", "adamw"): 11.08, ("frsf", "sgd"): 11.2, ("frsf", "adamw"): 11.22}


def rows(folder: Path, epochs: int, dataset: str) -> dict[tuple[str, str], dict]:
    """``{(label, optimizer): row}`` of one audit folder's report at ``epochs`` on ``dataset`` (else nothing)."""
    rep = Path(folder) / "report.json"
    if not rep.is_file():
        raise ValueError(f"{folder}: no report.json; pass audit folders (depthaudit audit --out DIR)")
    from .verified import verified_report

    doc = verified_report(Path(folder))  # checked against its run records and seal (an edit is never tabled)
    base = doc["config"]["base"]
    if (base.get("epochs"), base.get("dataset"), base.get("d_hidden"), base.get("num_blocks")) != (
            epochs, dataset, 256, 4) or base.get("stop_after"):  # the reference ResMLP (d = 256, L = 4) at
        # the budget only: an audit stopped after its first epochs (--stop-after) is not at the budget
        print(f"depthaudit: note: {folder} left out: its audit is {base.get('dataset')}, {base.get('epochs')} epochs"
              f"{' (stopped after ' + str(base['stop_after']) + ')' if base.get('stop_after') else ''}, d="
              f"{base.get('d_hidden')} L={base.get('num_blocks')}; this table is {dataset}, {epochs} epochs on the "
              "reference ResMLP (d=256, L=4)" + (": give --dataset/--epochs for another" if (base.get("d_hidden"),
              base.get("num_blocks")) == (256, 4) and not base.get("stop_after") else ": only audits of that model at "
              "their whole budget have rows"), file=sys.stderr)  # (walk 19 case 28: it offered --dataset/--epochs)
        return {}
    opt = base.get("optimizer", "adamw")  # (reports written before the optimizer was a choice: AdamW's)
    out = {}
    for m in doc["methods"]:
        if m.get("shallow_only"):
            continue
        angle = (m.get("weight_alignment") or {}).get("angle") or []
        cka = m.get("cka_to_bp") or []
        diverged = _diverged(folder, m) if m["trained_test_acc"]["mean"] is None else None
        out[(m["method"], opt)] = {
            "acc": m["trained_test_acc"]["mean"], "diverged": diverged,
            "frozen": (m.get("frozen_test_acc") or {}).get("mean") if diverged is None else diverged["frozen"],
            "gamma": m["standard_pair"]["aggregate_cosine_mean_per_layer"]["mean"],
            "angle": sum(a["mean"] for a in angle[:-1]) / len(angle[:-1]) if len(angle) > 1 else None,
            "cka": cka[-1]["mean"] if cka else None, "checks": m["checks"], "status": m.get("status"),
            "n": m.get("n_seeds"), "source": str(folder), "lr": base.get("lr")}
    return out


def _diverged(folder: Path, m: dict) -> dict | None:
    """A row whose trained runs diverged (the report leaves those pairs out of its means), from its run records.

    ``{"epoch": the first epoch a run diverged at, "frozen": its frozen twin's accuracy}``, else None.
    """
    if not (m.get("diverged") or {}).get("trained"):
        return None
    from ..config import TrainConfig

    def label(r: dict) -> str | None:  # the row a record belongs to: its method spec (fa:head=exact), not its name
        try:
            return str(TrainConfig.from_dict(r["config"]).method_spec)
        except Exception:  # noqa: BLE001 (a record this version cannot read back: no row of this table)
            return None

    name = m["method"]
    recs = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(Path(folder).glob("runs/*/result.json"))]
    mine = [r for r in recs if isinstance(r.get("config"), dict) and label(r) == name]  # (a variant row's runs
    # too: its diverged cell showed no epoch and no frozen twin)
    trained = [r for r in mine if r["config"].get("train_blocks") == "all" and r.get("status") == "diverged"]
    frozen = [r["final"].get("test_acc") for r in mine if r["config"].get("train_blocks") == "none"]
    epochs = [(r.get("final") or {}).get("diverged_at_epoch") for r in trained]
    return {"epoch": min((e for e in epochs if e is not None), default=None),
            "frozen": frozen[0] if len(frozen) == 1 else None}


def _f(x, spec=".3f") -> str:
    return "—" if x is None else format(x, spec)


def _check(c: dict) -> str:
    if c is None or c.get("value") is None:
        return "—"
    spec = "+.1f" if c.get("margin_unit") == "pp" else ".3g"
    return f"{fmt_num(c['value'], spec)} {c['status']}"


def field_md(found: dict[tuple[str, str], dict], epochs: int, dataset: str) -> str:
    """The table: every registered method (and every extra row label found) × both optimizers."""
    labels = list(dict.fromkeys([*METHODS.names(), *sorted(k[0] for k in found)]))
    head = (f"| method | optimizer | test acc | frozen | Γ mean | ∠(W,Bᵀ)° | CKA to BP (last) | D1 ρ | D2 ‖g_L‖ | "
            f"D3 gap pp | verdict | published (Table 1, AdamW) | peer: biotorch ResNet-20 |\n|{'---|' * 13}")
    lines = [f"Field table: {dataset}, {epochs} epochs; {sum(1 for _ in found)} of {len(labels) * 2} cells trained.",
             "", head]
    # the published figures are CIFAR-10's (Table 1: at 100 epochs): beside another budget they would read as its
    table1, peers = dataset == "cifar10" and epochs == 100, dataset == "cifar10"  # (walk 19 case 30)
    if not table1:
        hidden = "Table 1's (CIFAR-10, 100 epochs)" + ("" if peers else " and biotorch's (CIFAR-10)")
        lines.insert(1, f"\n(The published figures, {hidden}, are not shown beside {dataset} at {epochs} epochs.)")
    for label in labels:
        for opt in OPTIMIZERS:
            pub = TABLE1.get(label) if opt == "adamw" and table1 else None
            pub_s = f"{pub[0]:.3f} ± {pub[1]:.3f}" if pub else "—"
            peer = BIOTORCH_RESNET20.get((label, opt)) if peers else None
            pub_s += f" | {1 - peer / 100:.3f}" if peer is not None else " | —"
            r = found.get((label, opt))
            if r is None:
                lines.append(f"| {label} | {opt} | not trained at this budget | | | | | | | | | {pub_s} |")
                continue
            ch = r["checks"]
            flags = [k for k in ("D1", "D2", "D3") if (ch.get(k) or {}).get("status") == "FLAG"]
            from ..optim import OPTIMIZERS as REGISTERED

            default_lr = REGISTERED.meta(opt).get("lr")
            if r.get("lr") is not None and default_lr is not None and r["lr"] != default_lr:  # (said, not hidden)
                opt = f"{opt} (lr {r['lr']:g}; default {default_lr:g})"
            if r.get("diverged") is not None:  # a finding: the run's loss went non-finite (recorded, not averaged)
                at = r["diverged"]["epoch"]
                lines.append(f"| {label} | {opt} | diverged{f' (epoch {at})' if at is not None else ''} | "
                             f"{_f(r['frozen'])} | | | | | | | DIVERGED | {pub_s} |")
                continue
            lines.append(f"| {label} | {opt} | {_f(r['acc'])} | {_f(r['frozen'])} | {_f(r['gamma'])} | "
                         f"{_f(r['angle'], '.1f')} | {_f(r['cka'])} | {_check(ch.get('D1'))} | "
                         f"{_check(ch.get('D2'))} | {_check(ch.get('D3'))} | "
                         f"{'FLAG ' + ','.join(flags) if flags else 'PASS'} | {pub_s} |")
    return "\n".join(lines) + "\n"


def field_figure(found: dict[tuple[str, str], dict], path: Path) -> None:
    """Each trained cell's test accuracy (bar: green PASS, red FLAG) beside its frozen twin's (black tick)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = sorted(found, key=lambda k: (k[1], k[0]))
    fig, ax = plt.subplots(figsize=(max(4.0, 0.42 * len(keys) + 1.5), 3.6))
    for i, k in enumerate(keys):
        r = found[k]
        flagged = any((r["checks"].get(c) or {}).get("status") == "FLAG" for c in ("D1", "D2", "D3"))
        if r["acc"] is None:  # diverged: no bar, a cross at chance-free zero
            ax.plot(i, 0.0, marker="x", color="tab:red", ms=8)
        else:
            ax.bar(i, r["acc"], color="tab:red" if flagged else "tab:green", alpha=0.8)
        if r["frozen"] is not None:
            ax.plot([i - 0.4, i + 0.4], [r["frozen"]] * 2, color="black", lw=1.5)
    ax.set_xticks(range(len(keys)), [f"{lab} ({opt})" for lab, opt in keys], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("test accuracy")
    ax.set_title("Field at the budget: green PASS, red FLAG (D1/D2/D3), × diverged; tick = frozen-blocks twin",
                 fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    save_figure(fig, path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """``OUT.md DIR [DIR …] [--epochs N] [--dataset NAME]``: write and print the field table (+ OUT.png)."""
    if argv is None and "matplotlib" not in sys.modules:  # the script draws into a file only: the file backend,
        os.environ["MPLBACKEND"] = "Agg"  # whatever MPLBACKEND says (an unknown value would stop the import)
    argv = list(sys.argv[1:] if argv is None else argv)
    argv = [part for a in argv for part in (a.split("=", 1) if a.startswith(("--epochs=", "--dataset=")) else [a])]
    # (walk 21 W4: --epochs=10, the spelling every command takes, was "unknown option --epochs=10")
    if "-h" in argv or "--help" in argv:
        print(__doc__.strip())
        return 0
    opts = {"--epochs": "100", "--dataset": "cifar10"}
    for flag in opts:
        if argv.count(flag) > 1:
            print(f"depthaudit: error: {flag} is given {argv.count(flag)} times; give it once", file=sys.stderr)
            return 2
        if flag in argv:
            i = argv.index(flag)
            if i + 1 >= len(argv):
                print(f"depthaudit: error: {flag} needs a value", file=sys.stderr)
                return 2
            opts[flag] = argv[i + 1]
            del argv[i:i + 2]
    from ..data import DATASETS

    unknown = [a for a in argv if a.startswith("-") and len(a) > 1 and not Path(a).exists()]
    if unknown:  # (walk 19 case 197: --nope was read as a folder holding no report.json)
        print(f"depthaudit: error: unknown option {unknown[0]}; the options are --epochs N and --dataset NAME "
              "(--help)", file=sys.stderr)
        return 2
    if not opts["--epochs"].isdigit() or not 1 <= int(opts["--epochs"]) <= 2**63 - 1:
        print(f"depthaudit: error: --epochs {opts['--epochs']!r}: give the budget, an integer >= 1", file=sys.stderr)
        return 2
    if opts["--dataset"] not in DATASETS:
        print(f"depthaudit: error: --dataset {opts['--dataset']!r} not known; use one of "
              f"{', '.join(DATASETS.names())}", file=sys.stderr)
        return 2
    if len(argv) < 2:
        print("usage: python -m depthaudit.report.field OUT.md DIR [DIR ...] [--epochs 100] [--dataset cifar10]",
              file=sys.stderr)
        return 2
    if not argv[0].strip():  # (walk 19 case 39: '' was read as '.', a path never given)
        print("depthaudit: error: OUT.md '' is an empty path; give the table's file, e.g. docs/results/field_e100.md",
              file=sys.stderr)
        return 2
    out = Path(argv[0])
    if out.exists() and not (out.is_file() and out.read_text(errors="replace").startswith("Field table:")):
        print(f"depthaudit: error: {out} exists and is not a field table; choose another OUT.md", file=sys.stderr)
        return 2  # (only its own file is replaced: never an audit's report.md or a user's notes)
    png = out.with_suffix(".png")
    if png.exists() and not (png.is_file() and our_png(png)):  # (its figure: never a user's own picture)
        print(f"depthaudit: error: {png} exists and is not depthaudit's figure; choose another OUT.md", file=sys.stderr)
        return 2
    found: dict = {}
    try:
        for d in argv[1:]:
            for key, row in rows(Path(d), int(opts["--epochs"]), opts["--dataset"]).items():
                found.setdefault(key, row)  # the first folder named holds a cell: later ones do not replace it
    except (ValueError, OSError, KeyError, UsageError) as exc:
        print(f"depthaudit: error: {exc}", file=sys.stderr)
        return 2
    md = field_md(found, int(opts["--epochs"]), opts["--dataset"])
    try:  # the table and its figure: both or neither (walk 19 cases 34-36: an unwritable OUT was a traceback)
        with staged(out.parent) as tmp:
            write_text(tmp / out.name, md)
            if found:
                field_figure(found, tmp / out.with_suffix(".png").name)
    except OSError as exc:
        why = environment_error(exc) or f"{out}: cannot be written ({exc.strerror or exc}); choose another OUT.md"
        print(f"depthaudit: error: {why}", file=sys.stderr)
        return 2
    print(md)
    return 0


if __name__ == "__main__":
    from ..io import script

    sys.exit(script(main))
