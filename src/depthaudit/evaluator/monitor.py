"""The audit inside a user's own training loop (Cockpit style): two lines in the loop, the CLI's report at the end.

    mon = TrainingMonitor(model, probe_batches, schedule=lambda step: step % 100 == 0)
    frozen = frozen_twin(net, blocks="layers")         # before training: the D3 baseline, run through your loop too
    for step, (x, y) in enumerate(loader):
        ...                                            # your forward, backward, optimizer step
        mon.step(step)                                 # measures when schedule(step); D1/D2 fire as in the CLI
    report = mon.report(test_acc=acc, frozen_acc=frozen_acc)
    mon.write("results/my_run")                        # report.json, report.md, figures — the CLI's files
    print(mon.card())

D1/D2 fire through :class:`depthaudit.diagnostics.Monitor` with the CLI's thresholds (:class:`Thresholds`); the
report is assembled by the audit's own :func:`~depthaudit.experiments.audit.summarise_method`, decision table,
card and figures, so it reads exactly like ``depthaudit audit``'s. ``step`` is whatever your loop counts (an
epoch or an optimizer step); the card's "epoch" columns show that unit.
"""

# imports inside functions: report.figures (matplotlib) is imported only when a figure is shown (import cost)
import base64
import copy
import hashlib
import html
import math
import numbers
import sys
from pathlib import Path

import torch
from torch import nn

from ..diagnostics.base import MEASUREMENT_KEY
from ..diagnostics.identity import identity_stats
from ..diagnostics.monitor import Monitor, check_values
from ..errors import UsageError
from ..experiments.audit import DEFINITIONS, SCHEMA, identity_summary, summarise_method
from ..io import check_output_dir, foreign_report_file, not_ours_why, write_json, write_text
from ..models.base import ResidualModel
from ..provenance import provenance
from ..report import audit_markdown, audit_terminal
from ..report.verified import USER_LOOP_RUNS
from ..stores import seal
from ..verdicts import Thresholds, decision_table
from .core import CreditEvaluator, bp_twin, untouched

SOURCE = "depthaudit.evaluator.TrainingMonitor"


def frozen_twin(net: nn.Module, blocks: str | None = None) -> nn.Module:
    """A deep copy of ``net`` with its residual blocks frozen (``requires_grad=False``): the D3 baseline.

    Call it **at initialisation**, before training, then train the copy with your own loop exactly as the real
    model (your optimizer skips the frozen parameters; embedding and readout still train) and hand its test
    accuracy to :meth:`TrainingMonitor.report` as ``frozen_acc``. ``blocks`` names the blocks' container in
    ``net`` (as ``ResidualAdapter``'s ``blocks``); for a depthaudit ``ResidualModel`` it defaults to ``blocks``.
    Any feedback the layers carry (biotorch's ``weight_backward``) is copied too: same method, same recipe.
    """
    if blocks is None:
        if not isinstance(net, ResidualModel):
            raise UsageError(f"frozen_twin: name the blocks of your {type(net).__name__}, e.g. "
                             "frozen_twin(net, blocks='layers') (the name you gave ResidualAdapter)")
        blocks = "blocks"
    try:
        net.get_submodule(blocks)
    except AttributeError:
        raise UsageError(f"frozen_twin: {type(net).__name__} has no submodule {blocks!r}; name the blocks' "
                         "container as ResidualAdapter's blocks=") from None
    twin = copy.deepcopy(net)
    twin.get_submodule(blocks).requires_grad_(False)
    return twin


NOT_MEASURED = "NOT MEASURED"  # D3's status on a card made without a frozen twin


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _scalar(v):
    """A one-element tensor as a Python float; anything else as given."""
    return v.item() if isinstance(v, torch.Tensor) and v.numel() == 1 else v


def _finite(v) -> bool:
    return v is not None and math.isfinite(v)


class TrainingMonitor:
    """Records the evaluator's measurements over a user's loop; fires D1/D2; writes the CLI's report.

    Args:
        model: the residual model (a ``ResidualAdapter`` over your network), measured in place.
        batches: held-out ``(x, y)`` probe batches of one size.
        credit, reference, loss_fn, eps, d1_stat, eval_mode: as :class:`CreditEvaluator`.
        schedule: ``schedule(step) -> bool``, when to measure (default: every call).
        thresholds: D1/D2/D3 thresholds (the CLI's defaults: ρ > 50, ‖g_L‖ < 10·ε, gap < 2 pp).
        stop_on_flag: :attr:`should_stop` turns True once D1 or D2 fired (you break out of your loop).
        name: the method's name on the card.
        log: where the monitor's firing lines go (default: stderr), or None.

    Create it before training: it records the frozen-init identity check of the model then.
    """

    def __init__(self, model: ResidualModel, batches, credit="capture", reference="auto", schedule=None,
                 thresholds: Thresholds | None = None, stop_on_flag: bool = False, loss_fn=None,
                 eps: float | None = None, d1_stat: str = "median", eval_mode: bool = True, name: str = "method",
                 log=_stderr, device=None):
        if thresholds is not None and not isinstance(thresholds, Thresholds):
            raise UsageError(f"thresholds must be a Thresholds (e.g. da.Thresholds(rho_max=50)), got "
                             f"{type(thresholds).__name__}")
        self.thresholds = thresholds or Thresholds()
        eps = self.thresholds.eps if eps is None else eps
        self.evaluator = CreditEvaluator(model, batches, credit, reference, loss_fn, eps, d1_stat, eval_mode, device)
        if schedule is not None and not callable(schedule):
            raise UsageError(f"schedule={schedule!r}: pass a function schedule(step) -> bool, e.g. "
                             "lambda step: step % 100 == 0")
        self.schedule = schedule or (lambda step: True)
        th = self.thresholds
        self.monitor = Monitor(th.rho_max, th.ref_factor * eps, stop_on_flag)
        if not isinstance(name, str) or not name.strip():
            raise UsageError(f"name={name!r}: give the method's name for the card (e.g. name='myfa')")
        if "|" in name or any(not c.isprintable() for c in name) or len(name) > 64:  # a row label of report.md's
            # tables (walk 34 W7: "FA | biotorch" shifted every number under another header)
            raise UsageError(f"name={name[:40]!r}: a method's name on the card is one table cell: no '|' or line "
                             "break, at most 64 characters (e.g. name='FA (biotorch)')")
        self.name, self.d1_stat = name, d1_stat
        self.log = log
        self.history: list[dict] = []
        self._report: dict | None = None
        self._out: Path | None = None
        self.identity = self._identity()

    @property
    def model(self) -> ResidualModel:
        """The model measured."""
        return self.evaluator.model

    def _identity(self) -> dict:
        """The frozen-init identity check (SPEC §3) on the probe batches, exact reference through the BP twin."""
        batches = self.evaluator.batches
        x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
        with untouched(self.model), bp_twin(self.model):
            return identity_stats(self.model, x, y, batches[0][0].shape[0])

    def step(self, step: int, force: bool = False) -> list[str]:
        """Measure at ``step`` when ``schedule(step)`` (or ``force``); return the checks that first fired now."""
        if isinstance(step, bool) or not isinstance(step, numbers.Integral) or step < 0:
            raise UsageError(f"monitor step {step!r}: give your loop's step or epoch counter, an integer >= 0")
        step = int(step)  # (a numpy or torch integer is one)
        if not (force or self.schedule(step)):
            return []
        if self.history and step <= self.history[-1]["epoch"]:
            raise UsageError(f"monitor step {step} after step {self.history[-1]['epoch']}: steps must increase "
                             "(pass your loop's step or epoch counter)")
        measured = self.evaluator()
        self.history.append({"epoch": step, MEASUREMENT_KEY: measured})
        fired = self.monitor.update(step, measured)
        for name in fired:
            if self.log:
                self.log(f"  monitor: {name} fired at step {step} ({self.monitor.describe(name)})")
        return fired

    @property
    def should_stop(self) -> bool:
        """True once D1 or D2 fired under ``stop_on_flag``: end your loop there (status ``stopped_flagged``)."""
        return self.monitor.should_stop

    @property
    def fired(self) -> dict:
        """``{"D1": {"epoch": step, "value": v} | None, "D2": …}``: the first firing of each check."""
        return self.monitor.fired

    def _status(self, test_acc) -> str:
        last = check_values(self.history[-1][MEASUREMENT_KEY] if self.history else {})
        if not (_finite(test_acc) and all(_finite(last.get(check)) for check in self.monitor.fired)):
            return "diverged"
        return "stopped_flagged" if self.should_stop else "ok"

    def report(self, test_acc: float, frozen_acc: float | None = None, *, status: str | None = None,
               budget: int | None = None, dataset: str = "user data", arch: str | None = None, seed: int = 0,
               argv=None) -> dict:
        """The audit report (``report.json``'s content) of this run against its frozen twin's run.

        Args:
            test_acc: the trained model's test accuracy (a fraction), from your own evaluation.
            frozen_acc: the test accuracy of :func:`frozen_twin`'s copy trained by the same loop (D3); None (no
                frozen twin trained): the card reports Γ, D1 and D2 alone, D3 marked not measured.
            status: ``ok``, ``diverged`` or ``stopped_flagged``; default: ``diverged`` when the accuracy or the
                last D1/D2 values are not finite, ``stopped_flagged`` when the monitor asked to stop.
            budget: the planned number of steps (for "compute saved"); default: the last measured step.
            dataset: the data's name on the card's title.
            arch: the model's name on the card (default: its class name).
            seed: the run's seed (provenance).
            argv: the command line that produced the run (provenance).
        """
        if not self.history:
            raise UsageError("the monitor has measured nothing yet; call mon.step(step) in your loop (or "
                             "mon.step(0, force=True) once) before asking for the report")
        no_twin = frozen_acc is None
        test_acc, frozen_acc = _scalar(test_acc), math.nan if no_twin else _scalar(frozen_acc)
        for what, v in (("test_acc", test_acc), ("frozen_acc", frozen_acc)):
            if not (isinstance(v, (int, float)) and (not math.isfinite(v) or 0 <= v <= 1)):
                fix = " (train frozen_twin(…)'s copy with the same loop for D3)" if what == "frozen_acc" else ""
                raise UsageError(f"{what}={v!r}: give the test accuracy as a fraction in [0, 1]{fix}; NaN marks a "
                                 "diverged run")
        status = status or self._status(test_acc)
        if status not in ("ok", "diverged", "stopped_flagged"):
            raise UsageError(f"status={status!r}: use ok, diverged or stopped_flagged")
        th, ev = self.thresholds, self.evaluator
        L, last = self.model.num_blocks, self.history[-1]["epoch"]
        budget = last if budget is None else budget
        if isinstance(budget, bool) or not isinstance(budget, numbers.Integral) or budget < last:
            raise UsageError(f"budget={budget!r}: give the planned number of steps, an integer >= the last measured "
                             f"step ({last}), or leave it out")
        cfg = {"num_blocks": L, "epochs": max(budget, 1)}
        nan = lambda v: math.nan if v is None else float(v)  # noqa: E731
        trained = {"status": status, "config": cfg, "history": self.history, "monitor": self.monitor.to_dict(),
                   "final": {"test_acc": nan(test_acc), "epochs_completed": last,
                             "stopped_at_epoch": last if status == "stopped_flagged" else None},
                   "stored_as": USER_LOOP_RUNS[0]}
        frozen = {"status": "ok" if _finite(frozen_acc) or no_twin else "diverged", "config": cfg, "history": [],
                  "final": {"test_acc": nan(frozen_acc), "epochs_completed": None, "stopped_at_epoch": None},
                  "stored_as": USER_LOOP_RUNS[1]}
        summary = summarise_method(self.name, [trained], [frozen], th)
        if no_twin:  # D3 needs the frozen twin's accuracy: not measured, never a FLAG or a PASS
            summary["checks"]["D3"].update(value=None, margin=None, std=None, n=0, flagged_seeds=0,
                                           status=NOT_MEASURED)
            summary["flags"] = [f for f in summary["flags"] if f != "D3"]
            summary["frozen_test_acc"] = {"mean": None, "std": None, "n": 0}
        x0, y0 = ev.batches[0]
        base = {"dataset": dataset, "augment": "none", "arch": arch or type(self.model).__name__, "variant": "user",
                "d_hidden": _width(self.model, x0), "num_blocks": L, "mlp_ratio": None,
                "epochs": cfg["epochs"], "stop_after": None}
        config = {"base": base, "methods": [self.name], "seeds": [seed], "probe_batches": len(ev.batches),
                  "probe_batch_size": x0.shape[0], "track_every": None, "thresholds": th.to_dict(),
                  "d1_stat": self.d1_stat, "stop_on_flag": self.monitor.stop_on_flag, "source": SOURCE,
                  "evaluator": self.history[-1][MEASUREMENT_KEY].get("evaluator"),
                  # what was measured (no run records beside this report): `depthaudit report` names a plug-in's
                  # quantity that no loaded diagnostic renders, as it does for an audit's (walk 34 W3)
                  "measured": sorted({k for h in self.history for k in h[MEASUREMENT_KEY] if k != "evaluator"})}
        digest = hashlib.sha256()
        for x, y in ev.batches:
            for t in (x, y):  # raw bytes, any dtype (bf16 has no numpy view)
                digest.update(t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
        data = {"name": dataset, "source": "the probe batches given to TrainingMonitor", "sha256": digest.hexdigest()}
        num_classes = self._num_classes()
        identity = {"seeds": [seed], "variant": "user", "per_seed": [self.identity],
                    "summary": identity_summary([self.identity], L)}
        defs = {**DEFINITIONS, "monitor": "the first step (your loop's unit) at which D1 / D2 fired; compute saved = "
                "1 - step / budget", "evaluator": "depthaudit.evaluator: credit captured from the model's own "
                "backward (or given), reference exact through autograd or a BP twin of the same weights"}
        if (config["evaluator"] or {}).get("credit") == "capture":
            defs["update_cosine"] = ("ours: robust cos of block l's parameter gradient under the model's own backward "
                                     "(the method, captured) vs under the exact backward (the reference)")
        self._report = {"schema": SCHEMA, "config": config, "thresholds": th.to_dict(),
                        "provenance": provenance(x0.device, data, seed, argv, uses={"diagnostics": True}),
                        "definitions": defs,
                        "methods": [summary], "identity": identity,
                        "decision": decision_table([summary], 1.0 / num_classes, th)}
        return self._report

    def _num_classes(self) -> int:
        x, _ = self.evaluator.batches[0]
        with untouched(self.model), torch.no_grad():
            return self.model(x[:1]).shape[-1]

    def _repr_markdown_(self) -> str:
        """In Jupyter, the monitor displays its card (once reported) or what it has measured so far."""
        if self._report is None:
            return (f"TrainingMonitor of `{self.name}`: {len(self.history)} measurements so far; call "
                    "`mon.report(test_acc=…, frozen_acc=…)` for the card")

        return audit_markdown(self._report, {})

    def _repr_html_(self) -> str:
        """The card as Jupyter shows ``Result``'s (preformatted), with the figures inline once :meth:`write` ran."""
        if self._report is None:
            return f"<p>{html.escape(self._repr_markdown_())}</p>"
        figs = self._report.get("figures") or {}
        paths = [Path(self._out) / f for f in (figs.values() if isinstance(figs, dict) else figs)] if self._out else []
        imgs = "".join(f'<div><img src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}" '
                       'style="max-width:100%"></div>' for p in paths if p.is_file())
        return f"<pre>{html.escape(self.card())}</pre>{imgs}"

    def card(self, report: dict | None = None) -> str:
        """The terminal report card, as ``depthaudit audit`` prints it."""
        return audit_terminal(self._need(report))

    def _need(self, report):
        report = report or self._report
        if report is None:
            raise UsageError("no report yet; call mon.report(test_acc=…, frozen_acc=…) first")
        return report

    def write(self, out, report: dict | None = None) -> dict:
        """Write ``report.json``, ``report.md`` and the audit figures into ``out``; return the report."""
        from ..report.figures import audit_figures

        report = self._need(report)
        if isinstance(out, str) and (not out.strip() or "\0" in out):  # as da.train refuses it (not the cwd)
            raise UsageError(f"out {out!r} is an empty path or holds a NUL byte; give a folder (e.g. "
                             "'results/monitor'), or '.' for the current folder")
        out = Path(out)
        check_output_dir(out, "out")  # a FIFO or file where the folder must be: one line
        if (out / "identity.json").exists() or (out / "runs").is_dir() or (out / "result.json").exists():
            # a CLI command's folder: its report and runs (or a training's result.json) are not replaced by this one
            what = ("one training (its result.json)" if (out / "result.json").exists() and not (out / "runs").is_dir()
                    else "another command's results (its runs and report)")
            raise UsageError(f"out {out}: it holds {what}; write the monitor's report to a folder of its own")
        from ..stores import folder_holds

        if held := folder_holds(out):  # a ladder's, a probes', a saturation's store (walk 37 case 34: the report
            kind, file = held[0]  # was written beside them, and `report` then rendered the monitor's as theirs)
            raise UsageError(f"out {out}: it holds another command's results ({kind}: {file}); write the monitor's "
                             "report to a folder of its own")
        foreign = foreign_report_file(out)
        if foreign is not None:  # a user's own report.md or picture: never written over
            raise UsageError(f"{foreign} exists and {not_ours_why(foreign)} (the monitor writes its report there); "
                             "move it away or write to another folder")
        out.mkdir(parents=True, exist_ok=True)
        self._out = out  # (the figures Jupyter shows inline)
        report["figures"] = audit_figures(report, out)
        write_json(out / "report.json", seal(report))
        write_text(out / "report.md", audit_markdown(report, report["figures"]))
        return report


def _width(model: ResidualModel, x: torch.Tensor) -> int:
    """The stream width: the per-example size of ``h_0`` (features, or channels × positions)."""
    with untouched(model), torch.no_grad():
        h = model.embed(x[:1])
    return int(h[0].numel())
