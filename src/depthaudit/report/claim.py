"""The study's second claim as one figure: test accuracy against the credit cosine Γ across methods and penalties.

The claim (issue 34): a valid cosine does not predict depth utility. Every stored audit (``report.json``) and
intervention (``intervention.json``) named on the command line gives one point per row (and per λ): its mean test
accuracy against its headline Γ (mean over layers); the study's published points (Table 1 and §5, where it quotes
both numbers) are drawn beside them as hollow markers. Run::

    python -m depthaudit.report.claim OUT.png DIR [DIR ...]

and it prints the points it drew (one line each) beside writing the figure (atomically).
"""

import json
import os
import sys
from pathlib import Path

if __name__ == "__main__" and "matplotlib" not in sys.modules:  # the script draws into a file only: the file
    os.environ["MPLBACKEND"] = "Agg"  # backend, whatever MPLBACKEND says (an unknown value would stop the import)
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ..errors import UsageError  # noqa: E402
from ..io import our_png, save_figure  # noqa: E402
from .published_audit import SECTION5, SECTION5_COS, TABLE1, TABLE1_GAMMA  # noqa: E402

FAMILIES = ("bp", "fa", "dfa", "sb", "cb", "ep", "other")


def family(label: str) -> str:
    """``fa-stream:identity`` → ``fa``; a name no family claims → ``other``."""
    name = label.replace(" ", ":").split(":")[0]
    fam = "fa" if name.startswith("fa") else name
    return fam if fam in FAMILIES else "other"


def points(folder: Path) -> list[dict]:
    """One point per row (and λ) of the audit and intervention files in ``folder``: label, λ, epochs, acc, Γ."""
    out = []
    rep, itv = folder / "report.json", folder / "intervention.json"
    from .verified import verified_intervention, verified_report

    if rep.is_file():
        doc = verified_report(folder)  # checked against its run records and seal (an edit is never plotted)
        base = doc["config"]["base"]
        for m in doc["methods"]:
            out.append({"label": m["method"], "lambda": base.get("scale_penalty", 0.0), "epochs": base["epochs"],
                        "acc": m["standard_pair"]["test_acc"]["mean"],
                        "gamma": m["standard_pair"]["aggregate_cosine_mean_per_layer"]["mean"], "source": str(folder)})
    if itv.is_file():
        doc = verified_intervention(folder)
        epochs = next(iter(doc["audits"].values()))["config"]["base"]["epochs"]
        for r in doc["rows"]:
            for d in r["by_lambda"]:
                out.append({"label": r["method"], "lambda": d["lambda"], "epochs": epochs,
                            "acc": d["test_acc"]["mean"], "gamma": d["cos_mean"]["mean"], "source": str(folder)})
    if not out:  # a folder of single cells (``--cell``) before its report exists: its trained runs' own records
        for rec_path in sorted(folder.glob("runs/*/result.json")):
            out += _run_point(json.loads(rec_path.read_text(encoding="utf-8")), folder)
    return [p for p in out if p["acc"] is not None and p["gamma"] is not None]


def _run_point(rec: dict, folder: Path) -> list[dict]:
    """One point from one trained run's record (frozen twins are not points: their Γ is not the method's)."""
    cfg = rec.get("config") or {}
    if cfg.get("train_blocks") == "none" or not rec.get("history"):
        return []
    opts = ",".join(f"{k}={v}" for k, v in (cfg.get("method_options") or {}).items() if k in ("credit_at", "predictor"))
    label = cfg.get("method", "?") + (f":{opts}" if opts else "")
    if cfg.get("penalty_reduction", "example") != "example" and cfg.get("scale_penalty"):
        label += f" [{cfg['penalty_reduction']}]"
    if cfg.get("warmup"):
        label += f" after {cfg['warmup']} {cfg.get('warmup_fraction', 0.2):g}"
    probe = rec["history"][-1].get("probe") or {}
    return [{"label": label, "lambda": cfg.get("scale_penalty", 0.0), "epochs": cfg.get("epochs"),
             "acc": (rec.get("final") or {}).get("test_acc"),
             "gamma": (probe.get("credit_cosine") or {}).get("mean_per_layer"), "source": str(folder)}]


def published_points() -> list[dict]:
    """The study's (accuracy, Γ) pairs where it quotes both: Table 1's bridges, §5's penalised cells."""
    pts = [{"label": m, "lambda": 0.0, "epochs": 100, "acc": TABLE1[m][0], "gamma": g} for m, g in TABLE1_GAMMA.items()]
    pts += [{"label": m, "lambda": lam, "epochs": 30, "acc": SECTION5[(m, lam)][0], "gamma": c[0]}
            for (m, lam), c in SECTION5_COS.items()]
    return pts


def claim_figure(ours: list[dict], path: Path) -> None:
    """Accuracy against Γ: ours filled (λ = 0 circles, λ > 0 squares), the published hollow, one colour per family."""
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    colours = dict(zip(FAMILIES, plt.rcParams["axes.prop_cycle"].by_key()["color"], strict=False))
    for pts, hollow in ((ours, False), (published_points(), True)):
        for p in pts:
            c = colours[family(p["label"])]
            ax.scatter(p["gamma"], p["acc"], marker="o" if p["lambda"] == 0 else "s", s=42,
                       facecolors="none" if hollow else c, edgecolors=c, linewidths=1.4, zorder=3)
            lam = "" if p["lambda"] == 0 else f" λ={p['lambda']:g}"
            ax.annotate(f"{p['label']}{lam}{' (pub)' if hollow else ''}, {p['epochs']} ep", (p["gamma"], p["acc"]),
                        fontsize=5.5,
                        xytext=(3, 2), textcoords="offset points", color=c)
    ax.set_xlabel("headline credit cosine Γ (mean over layers)")
    ax.set_ylabel("test accuracy")
    ax.set_title("Does a valid cosine predict accuracy? filled: ours · hollow: published", fontsize=9)
    ax.grid(alpha=0.3)
    save_figure(fig, path)
    plt.close(fig)


def spearman(xs: list[float], ys: list[float]) -> float:
    """Spearman's rank correlation (ranks by sort order; ties are not averaged — fine for measured floats)."""
    def ranks(v):
        order = sorted(range(len(v)), key=v.__getitem__)
        r = [0.0] * len(v)
        for k, i in enumerate(order):
            r[i] = float(k)
        return r

    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    return cov / (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5


def main(argv: list[str] | None = None) -> int:
    """``OUT.png DIR [DIR …]``: the figure from every audit/intervention folder given; prints each point."""
    argv = sys.argv[1:] if argv is None else argv
    if "-h" in argv or "--help" in argv:
        print(__doc__.strip())
        return 0
    if len(argv) < 2:
        print("usage: python -m depthaudit.report.claim OUT.png DIR [DIR ...]", file=sys.stderr)
        return 2
    out = Path(argv[0])
    if out.suffix.lower() != ".png" or (out.exists() and not (out.is_file() and our_png(out))):
        print(f"depthaudit: error: {out}: give a new or depthaudit-written .png path (its own figure is all it "
              "replaces)", file=sys.stderr)
        return 2
    try:
        # one run stored in two folders (an audit's bp/dfa reused by another) is one point
        found = {d: points(Path(d)) for d in argv[1:]}
        ours = list({(p["label"], p["lambda"], p["epochs"], p["acc"], p["gamma"]): p
                     for d in argv[1:] for p in found[d]}.values())
    except (ValueError, OSError, KeyError, UsageError) as exc:
        print(f"depthaudit: error: {exc}", file=sys.stderr)
        return 2
    for d in (d for d, pts in found.items() if not pts):
        print(f"depthaudit: note: {d} holds no audit or intervention result (report.json, intervention.json): "
              "nothing of it is plotted", file=sys.stderr)
    if not ours:
        print("depthaudit: error: none of the folders given holds an audit or intervention result; nothing to plot "
              "(pass the --out folders of `depthaudit audit` / `intervene`)", file=sys.stderr)
        return 2
    for p in ours:
        print(f"{p['label']:36s} λ={p['lambda']:<7g} {p['epochs']:>3} ep  acc {p['acc']:.3f}  Γ {p['gamma']:.3f}  "
              f"({p['source']})")
    rest = [p for p in ours if family(p["label"]) != "bp"]  # BP's Γ is 1 by construction
    for lo, pts in ((None, rest), (0.1, [p for p in rest if p["gamma"] > 0.1])):
        if len(pts) > 2:
            rho = spearman([p["gamma"] for p in pts], [p["acc"] for p in pts])
            print(f"Spearman(Γ, accuracy) over {len(pts)} non-BP points{'' if lo is None else f' with Γ > {lo}'}: "
                  f"{rho:.2f}")
    claim_figure(ours, out)
    return 0


if __name__ == "__main__":
    from ..io import script

    sys.exit(script(main))
