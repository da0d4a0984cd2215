"""The Python API: one function per command, taking the config objects the CLI builds, writing the same stores.

    import depthaudit as da

    cfg = da.AuditConfig(base=da.TrainConfig(dataset="mnist1d", epochs=20), methods=("bp", "fa", "dfa"))
    report = da.audit(cfg, "results/audit")      # trains (or reuses) every run, writes report.json/.md + figures
    report                                       # in Jupyter: the card and the figures
    print(report.card)                           # the terminal card; report.markdown, report.record, report.figures

The CLI is a thin layer over these functions (``depthaudit audit`` parses flags into an :class:`AuditConfig` and
calls :func:`audit`), so a run started from Python and one started from the shell are the same run: same store,
same names, reused by each other. Method specs in ``methods`` (``"fa:head=exact"``) are parsed here once.
The caller's torch RNG streams are left as they were. Progress goes to stderr: a line per epoch and per finished
run, and tqdm bars (a widget in Jupyter) where a bar can be drawn; ``progress=False`` silences both, the
environment variable ``DEPTHAUDIT_PROGRESS=0`` the bars alone (``=1`` forces them; see :mod:`depthaudit.progress`).
"""

# imports inside functions: the report modules are imported where a report is drawn: they load matplotlib (import cost)
from __future__ import annotations

import base64
import contextlib
import dataclasses
import errno
import functools
import html
import inspect
import json
import logging
import math
import numbers
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .config import NAME_NEUTRAL, TrainConfig, nothing_trains, usable_device
from .data import ArrayData, DataBundle, load_data
from .data.base import DATASETS, unchanged_data
from .diagnostics.identity import identity_over_seeds
from .errors import ConfigError, UsageError
from .executors import workers_know
from .experiments.audit import AuditConfig, audit_specs, identity_summary, run_audit
from .experiments.families import FAMILIES, budget_text
from .experiments.grow import run_arm
from .experiments.intervene import InterveneConfig, intervention_specs, run_intervention
from .experiments.ladder import LadderConfig, ladder_specs, open_store
from .experiments.toward_bp import (
    bp_warm_start,
    credit_mix_specs,
    credit_mix_store,
    credit_mix_sweep,
    warm_start_specs,
    warm_start_store,
)
from .io import (
    LISTING_ONLY,
    REPORT_FILES,
    check_output_dir,
    check_replaceable,
    foreign_json,
    foreign_report_file,
    foreign_table_file,
    link_loops,
    not_ours_why,
    our_doc,
    remove_in_flight,
    staged,
    write_bytes_atomic,
    write_json,
    write_text,
)
from .loop import Stepper, build, check_fits, read_checkpoint
from .loop import train as train_run
from .plugins import HALF_WRITTEN, code_ended, os_exit_guarded
from .progress import bars, say
from .provenance import provenance
from .report import audit_markdown, audit_terminal, fmt_ms
from .report.card import unrendered_note
from .runlog import check_loggers
from .runner import fitted_probe_batches, probe_batch, result_record, save_run
from .stores import (
    ORDERLESS,
    FileStore,
    RunSpec,
    add_hint,
    claim_folder,
    file_lock,
    folder_lock,
    foreign_claim,
    grows,
    identity_diff,
    other_kind,
    seal,
    still_owner,
)
from .sweep import SweepOptions, SweepStatus, batch_cap, pick_cell, run_sweep

if TYPE_CHECKING:
    from .experiments.grow import GrowConfig
    from .experiments.probes import ProbesConfig
    from .experiments.saturation import SaturationConfig


@dataclass
class Result:
    """What a command wrote: its record (the JSON), the text card, the Markdown, the figures and where they are.

    In Jupyter a result displays itself (the card, then every figure inline).
    """

    path: Path | None  # None where nothing was written (da.identity without out=)
    record: dict
    card: str
    markdown: str = ""
    figures: list[Path] = field(default_factory=list)
    stopped: str | None = None  # the sweep did what was asked and no more (a cell listing, one cell): no report

    @classmethod
    def stopped_sweep(cls, path: Path, status) -> Result:
        """A sweep that stopped short (``--list-cells``, ``--cell``): its message is the card, nothing is reported."""
        return cls(Path(path), {"records": status.records}, status.stopped, stopped=status.stopped)

    def __str__(self) -> str:
        return self.card

    def _repr_html_(self) -> str:
        imgs = "".join(f'<div><img src="data:image/png;base64,{base64.b64encode(Path(f).read_bytes()).decode()}" '
                       f'style="max-width:100%"></div>' for f in self.figures if Path(f).is_file())
        where = "" if self.path is None else f"<p><code>{html.escape(str(self.path))}</code></p>"
        return f"<pre>{html.escape(self.card)}</pre>{imgs}{where}"


def _log(progress: bool):
    return say if progress else (lambda m: None)


def _api_call(fn):
    """An API function as a notebook expects it: progress per its ``progress``, the caller's RNG streams kept.

    Bars: :func:`depthaudit.progress.bars`.
    Runs seed themselves (their results never depend on the global stream), but model construction and growth
    call ``torch.manual_seed``; the CPU stream, and each CUDA device's where CUDA was initialised before the call,
    are restored afterwards, also when the call raises.
    """
    sig = inspect.signature(fn)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        out = sig.bind_partial(*args, **kwargs).arguments.get("out")  # (Path("") is ".": checked before Path())
        required = "out" in sig.parameters and sig.parameters["out"].default is inspect.Parameter.empty
        if (out is None and required) or (out is not None and not isinstance(out, str | os.PathLike)):
            raise ConfigError(f"{{out}} must be a folder path (a str or Path), got {type(out).__name__} {out!r}")
        if isinstance(out, str) and (not out.strip() or "\0" in out):
            raise ConfigError(f"{{out}} {out!r} is {'an empty path' if not out.strip() else 'a path with a NUL byte'}"
                              "; give a path (e.g. 'results/run1'), or '.' for the current folder")

        for name, value in sig.bind_partial(*args, **kwargs).arguments.items():  # (walk 12 case 112: "yes" was
            if sig.parameters[name].annotation in (bool, "bool") and not isinstance(value, bool):  # taken as True)
                raise ConfigError(f"{{{name}}} must be True or False, got {type(value).__name__} {value!r}")
        given = sig.bind_partial(*args, **kwargs).arguments.get("config")
        want = sig.parameters["config"].annotation if "config" in sig.parameters else None
        if isinstance(want, str) and want.isidentifier() and given is not None \
                and want not in {c.__name__ for c in type(given).__mro__}:  # (a subclass of the config is one)
            raise ConfigError(f"{{config}} must be a {want} (da.{want}(...)), got {type(given).__name__}")
        cpu = torch.get_rng_state()
        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
        sweep = kwargs.get("sweep")  # a sweep that trains nothing: its configs may name a device this machine lacks
        idle = getattr(sweep, "list_cells", False) or getattr(sweep, "stored_only", False)  # (a wrong type: _sweep)
        token = LISTING_ONLY.set(bool(getattr(sweep, "list_cells", False)))
        fonts = logging.getLogger("matplotlib.font_manager")  # its font fallbacks ("findfont: Font family … not
        level = fonts.level  # found", a line per font) are not the figures' news: quiet during the call, as the
        fonts.setLevel(logging.ERROR)  # CLI keeps it
        try:
            with bars(kwargs.get("progress", True)), nothing_trains() if idle else contextlib.nullcontext(), \
                    os_exit_guarded(), torch.inference_mode(False), torch.enable_grad():  # (a plug-in's os._exit:
                # named, not the process gone without a word; a caller's no_grad, inference_mode or
                # set_grad_enabled(False) is the notebook's, not the training's: walk 28 W2)
                return fn(*args, **kwargs)
        except SystemExit as exc:  # a plug-in's sys.exit/os._exit in its own code: named, as the CLI names it,
            line = code_ended(exc)  # never a bare SystemExit that ends the caller's script with the plug-in's
            if line is None:  # code and no word (walk 41 W1: sys.exit(0) ended a job "successfully")
                raise
            remove_in_flight()
            raise UsageError(f"{line} {HALF_WRITTEN}") from exc
        finally:
            fonts.setLevel(level)
            LISTING_ONLY.reset(token)
            torch.set_rng_state(cpu)
            if cuda is not None:
                torch.cuda.set_rng_state_all(cuda)

    return call


def _fitted_recipe(n: int, batch: int, warmup, fraction: float, epochs) -> tuple[int, Any, float]:
    """``(batch_size, warmup, warmup_fraction)`` as a split of ``n`` training examples trains them.

    The one rule for what trains is what is stored (walk 24 W2, W3), read by :func:`_fit_batch` before a run and
    by :func:`same_audit` against a stored report: a batch above the split trains one full batch a step (the same
    run under 8000 and 100000 named two configurations that refused each other's folders); a warm-up whose
    fraction rounds to no step of the budget, as the loop counts steps, is no warm-up.
    """
    batch = min(batch, n)
    if warmup is not None and isinstance(epochs, int) and round(fraction * epochs * math.ceil(n / batch)) == 0:
        warmup, fraction = None, 0.2
    return batch, warmup, fraction


def _fit_batch(cfg, data, progress: bool):
    """``cfg`` as it trains on ``data`` (:func:`_fitted_recipe`), each change said on stderr."""
    n = data.x_train.shape[0] if hasattr(data, "x_train") else None
    if n is None or cfg.batch_size is None:
        return cfg
    warmup = getattr(cfg, "warmup", None)
    batch, new_warmup, fraction = _fitted_recipe(n, cfg.batch_size, warmup, getattr(cfg, "warmup_fraction", 0.2),
                                                 cfg.epochs)
    if batch != cfg.batch_size:
        _log(progress)(f"depthaudit: note: batch size {cfg.batch_size} exceeds the {n} training examples: training "
                       f"(and recording) batch size {n}, one full batch a step")
        cfg = replace(cfg, batch_size=batch)
    if new_warmup != warmup:
        total = cfg.epochs * math.ceil(n / batch)
        _log(progress)(f"depthaudit: note: --warmup {warmup} has no effect with --warmup-fraction "
                       f"{cfg.warmup_fraction:g}: {cfg.warmup_fraction:g} × {total} steps rounds to no step "
                       "under it; training (and recording) no warm-up")
        cfg = replace(cfg, warmup=None, warmup_fraction=fraction)
    return cfg


def _data(cfg: TrainConfig, data):
    if isinstance(data, ArrayData):  # a loader's arrays, not yet a bundle (walk 34 W6: an AttributeError deep in
        raise ConfigError("{data} is an ArrayData (what a dataset's loader returns), not a loaded dataset; register "
                          "its loader (da.DATASETS.register(name)) and pass da.load_data(name, None, False, device) "
                          "with dataset=name in the config, or leave {data} out")  # the loop)
    if data is not None and not isinstance(data, DataBundle):  # (data="notdata": named, not an AttributeError)
        raise ConfigError(f"{{data}} must be a dataset loaded by depthaudit (da.load_data(...)), got "
                          f"{type(data).__name__}")
    if data is not None and getattr(data, "name", cfg.dataset) != cfg.dataset:  # every record names the data by it
        raise ConfigError(f"{{data}} is {data.name!r}'s data but the config names dataset {cfg.dataset!r}, which every "
                          f"record and file name would carry; give {{dataset={data.name}}} in the config")
    if data is not None:
        unchanged_data(data)
    elif cfg.dataset not in DATASETS:  # (walk 16 case 83: a plain UsageError with no .field)
        raise ConfigError(f"{{dataset}} {cfg.dataset!r} not known; use one of {', '.join(DATASETS.names())} (or "
                          "register your own first)")
    device = torch.device(cfg.device)
    if device.type == "cuda" and not torch.cuda.is_available():  # listing or reporting GPU runs: nothing trains
        device = torch.device("cpu")
    return data if data is not None else load_data(cfg.dataset, cfg.data_dir, cfg.download, device,
                                                   fingerprint=False)


def _arms(config, data) -> list:
    """A sweep config's distinct run shapes: each method's, and its parameter-matched shallow one where asked."""
    base = config.base
    cfgs = [base.with_method(m) for m in config.methods]
    if getattr(config, "shallow_blocks", 0):  # (its width is computed: checked before any folder is claimed too)
        from .experiments.shallow import matched_shallow, shallow_config

        match = matched_shallow(base, data.input_shape, data.num_classes, config.shallow_blocks)
        cfgs += [shallow_config(c, match) for c in cfgs]
    return cfgs


def _buildable(cfgs, data, opts=None) -> None:
    """Refuse, before any folder is claimed, a run this data cannot train: built once on the CPU, then dropped.

    (An image augmentation on vectors, a ViT width not divisible by its heads: one line, nothing written.) With
    the sweep's ``opts``: a name its ``jobs`` workers will not know is refused too (:func:`workers_know`).
    """
    for cfg in cfgs:
        c = replace(cfg, device="cpu", warm_start=None)
        model, method = build(c, data)
        Stepper(c, data, model, method)
    if opts is not None:
        workers_know(cfgs, opts)


def _sweep(sweep, out: Path, device: str):
    """The sweep's options (the caller's, else the defaults), checked before any folder is claimed."""
    if sweep is None:
        return SweepOptions(batch_runs=batch_cap(None, device), log_dir=str(Path(out) / "logs"))
    if not isinstance(sweep, SweepOptions):  # e.g. a dict: named here, not an AttributeError deep in the sweep
        raise ConfigError(f"{{sweep}} must be a SweepOptions (e.g. da.SweepOptions(jobs=2)), got "
                          f"{type(sweep).__name__}")
    if not (sweep.stored_only or sweep.list_cells):  # nothing trains there: no live log to open (walk 26 case 158:
        check_loggers(sweep.log, sweep.log_dir)  # a missing TensorBoard refused a --log said to do nothing)
    return sweep


@_api_call
def train(config: TrainConfig, out: str | Path, *, data=None, checkpoint: bool = True, force: bool = False,
          progress: bool = True, argv: list[str] | None = None) -> Result:
    """Train one run under ``config`` and write ``out/result.json`` (+ ``checkpoint.pt``)."""
    out = Path(out)
    usable_device(config.device)
    check_output_dir(out)
    for name in ("result.json", "identity.json", ".lock", ".train.lock", *(("checkpoint.pt",) if checkpoint else ())):
        check_replaceable(out / name)  # a FIFO or device where train writes: refused before anything is made or
        # trained (walk 28 W8: a FIFO result.json was "already exists; pass --force", which trained and lost the run)
    _own_training_files(out)
    data = _data(config, data)
    config = _fit_batch(config, data, progress)  # (before the record beside is compared: what trains is stored)
    if (out / "result.json").exists() and not force:
        raise _result_exists(out, config, data.sha256)
    if config.warm_start:  # a damaged checkpoint is refused before any work
        read_checkpoint(config.warm_start)
        beside = Path(config.warm_start).parent / "result.json"
        if beside.is_file() and not isinstance(_as_written(beside, None), dict):  # (walk 19 case 119: unsaid)
            _log(progress)(f"depthaudit: note: --warm-start {config.warm_start}: the result.json beside it cannot be "
                           "read (damaged or truncated?), so the checkpoint is not checked against its record")
    Stepper(config, data, *build(config, data))  # model, warm start and augmentation fit the data: refused here
    with claim_training(out, config, force):  # before it trains: a second training into ``out`` is refused
        log = _log(progress)
        log(f"depthaudit train: {config.method} on {config.arch} d={config.d_hidden} L={config.num_blocks} "
            f"train_blocks={config.train_blocks}, {config.dataset} ({data.x_train.shape[0]} train), "
            f"{config.epochs} epochs on {config.device}")
        run = train_run(config, data, log=log)
        record = result_record(config, data, run, argv or ["depthaudit.train"])
        save_run(out, record, run, checkpoint=checkpoint)
    acc = run.final["test_acc"]  # None after --epochs 0: no epoch was trained, so none was evaluated
    acc = "— (no epoch trained; nothing evaluated)" if acc is None else acc
    card = f"{run.status}: final test_acc {acc}  → {out / 'result.json'}"
    return Result(out / "result.json", _as_written(out / "result.json", record), card)


def _as_written(path: Path, record: dict) -> dict:
    """The JSON at ``path`` as a dict, else ``record``.

    What ``Result.record`` promises: the file as written, seals and checkpoint digests included (walk 16 cases
    22-30: the in-memory record lacked what the writer added).
    """
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return record
    return doc if isinstance(doc, dict) else record


def _result_exists(out: Path, config: TrainConfig, data_sha256: str | None = None) -> UsageError:
    """The refusal of a train into a folder whose ``result.json`` exists: whose run it is, and --force.

    One line wherever it is found: before the claim, or under the folder's lock when another train finished in
    between (walk 30 W3: that one was unqualified, so --force was offered without saying whose run it replaces).
    """
    held = _held_run(out, config)
    was = ((_as_written(out / "result.json", {}).get("provenance") or {}).get("data") or {}).get("sha256")
    if held == " (this configuration's)" and data_sha256 and isinstance(was, str) and was != data_sha256:
        held = (f" (this configuration's, trained on other data: its data sha256 {was[:12]}…, this data's "  # (walk
                f"{data_sha256[:12]}…)")  # 35 W3: "this configuration's" of a run of regenerated data)
    if held == " (this configuration's)":  # (walk 19 case 118: a record edited after it was written was called
        rec = _as_written(out / "result.json", {}).get("config")  # this configuration's run, unsaid)
        try:  # the record's config in the claim's form: its options at their defaults are no difference (walk
            with nothing_trains():  # 36 W1: method_options.flip, filled in by the record, read as an edit)
                rec = json.loads(json.dumps(TrainConfig.from_dict(rec).identity_dict(), default=str))
        except Exception:  # noqa: BLE001 (a record the config cannot read: compared as it stands)
            pass
        now = json.loads(json.dumps(config.identity_dict(), default=str))
        both = [k for k in now if k in rec] if isinstance(rec, dict) else []  # (options: flat in the claim)
        diff = identity_diff({k: rec[k] for k in both}, {k: now[k] for k in both}) if both else ["config"]
        if diff:
            held = (f" and its config differs from the folder's claim (identity.json) in {', '.join(diff[:6])}: "
                    "edited after it was written?")
    return UsageError(f"{out}/result.json already exists{held}; pass --force (force=True) to overwrite or choose "
                      "another output folder")


def _held_run(out: Path, config: TrainConfig) -> str:
    """`` (a run of another configuration: differs in lr)`` when ``out``'s claim names another config; else ''.

    (Walk 15 case 211: the refusal read as if the same run were stored, and --force would replace another's.)
    """
    try:
        was = json.loads((out / "identity.json").read_text()).get("identity")
    except (OSError, ValueError, AttributeError):
        return ""
    now = json.loads(json.dumps(config.identity_dict(), default=str))  # (as the claim was written: lists)
    diff = identity_diff(was, now) if isinstance(was, dict) else []
    return f" (a run of another configuration: differs in {', '.join(diff[:6])})" if diff else " (this configuration's)"


def _own_training_files(out: Path) -> None:
    """A user's own ``result.json`` or ``checkpoint.pt`` in a training's folder: refused, never offered to --force."""
    if foreign_json(out / "result.json"):  # (walk 19 case 119: a truncated record read as a user's own file)
        try:
            json.loads((out / "result.json").read_text(encoding="utf-8"))
            what = "is not depthaudit's"
        except (OSError, ValueError):
            what = "cannot be read as JSON (a damaged or truncated record, or a file of your own)"
        raise UsageError(f"{out / 'result.json'} exists and {what}; move it away or choose another --out")
    if foreign_claim(out / "identity.json"):  # a user's own file where the claim goes, said before "already exists
        # … pass --force", which then refused it (walk 23 W2)
        raise UsageError(f"{out / 'identity.json'} exists and is not depthaudit's (the folder's claim is written "
                         "there); move it away or choose another --out")
    if (out / "checkpoint.pt").is_file() and not (out / "result.json").exists():  # (ours is written with its record)
        raise UsageError(f"{out / 'checkpoint.pt'} exists beside no result.json, so it is no run depthaudit finished; "
                         "move it away or choose another --out")


@contextmanager
def claim_training(out: Path, config: TrainConfig, force: bool):
    """Hold ``out`` for one training: a second one into it (any config) is refused in one line before it trains.

    The folder's lock (``out/.train.lock``) is held until the run is written; the folder is claimed for this
    config (``out/identity.json``, as the sweeps claim theirs), and an existing result is replaced only with
    ``force``.
    """
    made = not out.exists()
    _own_training_files(out)
    if foreign_claim(out / "identity.json"):  # a user's own file where the claim goes: refused before the lock
        raise UsageError(f"{out / 'identity.json'} exists and is not depthaudit's (the folder's claim is written "
                         "there); move it away or choose another --out")
    other_kind(out, "train")  # another command's folder: refused before the lock file is made (walk 27 W4)
    with file_lock(out / ".train.lock", wait=False) as held:
        if not held:
            raise UsageError(f"{out} is being written by another depthaudit train right now; wait for it to end, "
                             "or choose another --out")
        if (out / "result.json").exists() and not force:
            raise _result_exists(out, config)
        had_claim = (out / "identity.json").exists()
        before = (out / "identity.json").read_bytes() if had_claim and (out / "identity.json").is_file() else None
        claim_folder(out, "train", config.identity_dict(), take_over=force,
                     take_over_flag="--force (force=True)")
        try:
            yield
        except BaseException:  # nothing new was kept: the folder's claim is what it was (a folder it made: removed)
            if before is not None:  # (--force into a finished run, interrupted: the claim must still name that run)
                write_bytes_atomic(out / "identity.json", before)
            if not (out / "result.json").exists():
                for f in ([] if had_claim else ["identity.json"]) + [".lock", ".train.lock"]:
                    (out / f).unlink(missing_ok=True)
                if made and not any(out.iterdir()):
                    out.rmdir()
            raise


@_api_call
def audit(config: AuditConfig, out: str | Path, *, data=None, sweep=None, progress: bool = True,
          replace_report: bool = False, argv: list[str] | None = None) -> Result:
    """The audit protocol: every trained/frozen pair (trained or reused), the card, report.json/.md and figures."""
    from .report.figures import audit_figures

    out = Path(out)  # (the config resolved itself when built: specs parsed, seeds once, every rule checked)
    check_output_dir(out, subdirs=("runs",))
    other_kind(out, "audit")  # (a train folder: refused before any cell is listed, trained or assembled)
    data = _data(config.base, data)
    config = replace(config, base=_fit_batch(config.base, data, progress))
    check_probe_fits(config.probe_batch_size, data)  # bad input is named before another audit's report is (walk
    # what is measured is recorded: probe batches clamped to the held-out split, before the stored report is
    # compared (walk 26 W3: the same command's 20 was "another audit" than its own stored 15)
    config = replace(config, probe_batches=fitted_probe_batches(data, config.probe_batches, config.probe_batch_size))
    same_audit(out, config, replace_report)  # 25 W1: "another audit … --replace-report", which then refused it)
    base = config.base
    opts = _sweep(sweep, out, base.device)
    if opts.cell is not None:
        pick_cell(audit_specs(config, data), opts.cell)
    _buildable(_arms(config, data), data, opts)
    log = _log(progress)
    claim = None
    if not opts.list_cells and not opts.stored_only:  # the folder's report belongs to one audit: claimed before
        # anything trains (--stored-only trains nothing: it claims once every cell is found, below)
        claim = claim_folder(out, "audit", audit_identity(config, data.sha256), replace_report)
        log(f"depthaudit audit: {', '.join(config.methods)} × seeds {list(config.seeds)} on {base.dataset} "
            f"{base.arch} d={base.d_hidden} L={base.num_blocks}, {base.epochs} epochs, {base.device} → {out}")
    report = run_audit(config, data, out, log=log, argv=argv or ["depthaudit.audit"], opts=opts)
    if not isinstance(report, dict):  # a cell listing or one cell: the sweep's status, no report
        return Result.stopped_sweep(out, report)
    if claim is None:
        claim = claim_folder(out, "audit", audit_identity(config, data.sha256), replace_report)
    with still_owner(out, claim), staged(out) as tmp:  # report, markdown and figures: all of them or none
        figures = audit_figures(report, tmp)
        report["figures"] = figures
        write_json(tmp / "report.json", seal(report))  # sealed: a hand edit (say, of its provenance) shows
        md = audit_markdown(report, figures)
        write_text(tmp / "report.md", md)
    note = unrendered_note(report, out)  # a plug-in's quantities, measured but not rendered here: said (walk 24)
    if note:
        print(note, file=sys.stderr)
    return Result(out / "report.json", _as_written(out / "report.json", report), audit_terminal(report), md,
                  [out / f for f in (figures.values() if isinstance(figures, dict) else figures)])


@_api_call
def ladder(config: LadderConfig, out: str | Path, *, data=None, sweep=None, progress: bool = True,
           audit_dir: str | Path | None = None, verbose: bool = False, argv: list[str] | None = None) -> Result:
    """The depth-utility ladder: train the last k blocks for every k, method and seed; table and figure."""
    from .report.ladder import ladder_report

    base = config.base  # (resolved when built: k-values 0..L by default, each checked)
    out = Path(out)
    check_output_dir(out, "--output_dir")
    other_kind(out, "ladder")  # another command's folder: refused before a cell is listed, trained or remembered
    opts = _sweep(sweep, out, base.device)
    data = _data(base, data)
    config = replace(config, base=_fit_batch(base, data, progress))
    base = config.base
    check_probe_fits(config.probe_batch_size, data)
    config = replace(config, probe_batches=fitted_probe_batches(data, config.probe_batches, config.probe_batch_size))
    specs = ladder_specs(config, data)
    if opts.cell is not None:
        pick_cell(specs, opts.cell)
    _buildable(_arms(config, data), data, opts)
    store = open_store(out, config, data.sha256)  # refuses a file of another configuration
    log = _log(progress)
    if not opts.list_cells and not opts.stored_only:  # (--stored-only: run_sweep claims once every cell is found)
        store.claim()  # under the lock: a sweep of another configuration started a moment ago is refused too
        log(f"depthaudit ladder: {len(specs)} runs ({len(config.methods)} methods × {len(config.k_values)} k × "
            f"{len(config.seeds)} seeds), {base.dataset} {base.arch} d={base.d_hidden} L={base.num_blocks}, "
            f"{base.epochs} epochs, {base.device}, jobs {opts.jobs} → {store}")
    status = run_sweep(specs, store, data=data if opts.jobs == 1 else None, argv=argv or ["depthaudit.ladder"],
                       opts=opts, log=log, run_log=(lambda m: log("    " + m)) if verbose else None)
    if not status.complete:
        return Result.stopped_sweep(out, status)  # (the folder: the file is not written yet, walk 31 case 144)
    with file_lock(store.path.with_suffix(".lock")):  # (`depthaudit report` renders under it too: walk 28 W4)
        md, table = ladder_report(store.path, Path(audit_dir) if audit_dir else None)
    doc = json.loads(store.path.read_text(encoding="utf-8"))  # (the record: the ladder JSON, every run in it)
    asked = {c.key for c in specs}
    beyond = sorted(k for k in (doc.get("runs") or {}) if k not in asked)
    if beyond:  # one ladder file per configuration: its table counts the runs an earlier call added too
        log(f"depthaudit: note: the table counts every run in {store.path.name}, also {len(beyond)} this call did not "
            f"ask for ({', '.join(beyond[:4])}{' …' if len(beyond) > 4 else ''}); a separate --output_dir keeps "
            "ladders apart")
    md_path = store.path.with_suffix(".md")
    md = md_path.read_text(encoding="utf-8") if md_path.exists() else md
    return Result(store.path, _as_written(store.path, doc), table, md, [store.path.with_suffix(".png")])


@_api_call
def intervene(config, out: str | Path, lambdas=None, *, data=None, sweep=None, progress: bool = True,
              argv: list[str] | None = None) -> Result:
    """The audit over a grid of scale-penalty λ, side by side: intervention.json/.md and its figure.

    ``config``: an :class:`~depthaudit.experiments.intervene.InterveneConfig`, or an :class:`AuditConfig` with
    the grid ``lambdas`` (default: the reference's 0, 1e-4, 1e-2, 1e-1); the config checks both.
    """
    from .report.intervene import intervention_doc, intervention_figure, intervention_md

    if not isinstance(config, InterveneConfig):
        config = InterveneConfig(audit=config, lambdas=lambdas)
    elif lambdas is not None:  # two grids, one of them silently dropped (walk 28 W6): refused, as penalty beside
        raise ConfigError(f"{{lambdas}} {lambdas!r} beside an InterveneConfig, which has its own grid "  # lambdas is
                          f"{tuple(config.lambdas)!r}; give the grid once: InterveneConfig(..., lambdas=...), or "
                          "pass an AuditConfig with lambdas=")
    form, reduction = config.penalty_form, config.penalty_reduction
    config, lambdas = config.audit, list(config.lambdas)
    out = Path(out)
    check_output_dir(out, subdirs=("runs",))
    other_kind(out, "intervene")
    data = _data(config.base, data)
    config = replace(config, base=_fit_batch(config.base, data, progress))
    check_probe_fits(config.probe_batch_size, data)
    config = replace(config, probe_batches=fitted_probe_batches(data, config.probe_batches, config.probe_batch_size))
    opts = _sweep(sweep, out, config.base.device)
    if opts.cell is not None:  # a cell that is not in the grid: refused before the claim (as the audit's)
        pick_cell(intervention_specs(config, lambdas, data, out, form, reduction)[1], opts.cell)
    _buildable(_arms(config, data), data, opts)
    _not_foreign(out / "intervention.json", [out / "intervention.md", out / "intervention.png"])
    claim = None
    ident = {**audit_identity(config, data.sha256), **({"penalty_form": form} if form != "abs" else {}),
             **({"penalty_reduction": reduction} if reduction != "example" else {})}  # (the defaults: as before)
    if not opts.list_cells and not opts.stored_only:  # the report belongs to one configuration: claimed before
        # training, a --cell's too, as the audit's cells claim (walk 30 W2: unclaimed, another recipe's cells and a
        # ladder trained into the folder); a λ grid of the same configuration may replace the report (its runs are
        # shared, none is lost); --stored-only trains nothing and claims once every cell is found
        claim = claim_folder(out, "intervene", ident, take_over_flag=None)
    res = run_intervention(config, lambdas, data, out, log=_log(progress), argv=argv or ["depthaudit.intervene"],
                           opts=opts, form=form, reduction=reduction)
    if not isinstance(res, dict):  # a cell listing or one cell: the sweep's status, no report
        return Result.stopped_sweep(out, res)
    if claim is None and opts.stored_only:
        claim = claim_folder(out, "intervene", ident, take_over_flag=None)
    table = intervention_md(res)
    md = intervention_doc(res, table)
    with still_owner(out, claim), staged(out) as tmp:  # table, JSON and figure: all of them or none
        before = _stored_grid(out / "intervention.json")  # read under the lock: a concurrent grid's too (walk 18
        intervention_figure(res, tmp / "intervention.png")  # cases 79, 80: both said "wrote", one report was left)
        write_json(tmp / "intervention.json", res)
        write_text(tmp / "intervention.md", md)
    if before is not None and before != res["lambdas"]:  # the same configuration, another grid (walk 17 case 87)
        print(f"depthaudit: note: replaced {out / 'intervention.json'}, the report of the grid λ ∈ "
              f"{', '.join(f'{x:g}' for x in before)}, by λ ∈ {', '.join(f'{x:g}' for x in res['lambdas'])} (the "
              "runs of both stay in runs/; rerun with the grid you want reported)", file=sys.stderr)
    return Result(out / "intervention.json", _as_written(out / "intervention.json", res), table, md,
                  [out / "intervention.png"])


def _stored_grid(path: Path) -> list[float] | None:
    """The λ grid of the intervention.json a rerun is about to replace (None: none, or not one of ours)."""
    try:
        doc = json.loads(path.read_text()) if path.is_file() else None
        return [float(x) for x in doc["lambdas"]] if isinstance(doc, dict) and doc.get("lambdas") else None
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _not_foreign(json_path: Path, files: list[Path]) -> None:
    """Refuse, before anything trains, a user's own file among those a command writes beside ``json_path``."""
    foreign = foreign_table_file(json_path, files) or foreign_json(json_path)
    if foreign is not None:
        raise UsageError(f"{foreign} exists and {not_ours_why(foreign)} (this command writes its results there); "
                         "move it away or choose another --out")


@_api_call
def probes(config: ProbesConfig, out: str | Path, *, data=None, sweep=None, progress: bool = True,
           replace_report: bool = False, argv: list[str] | None = None) -> Result:
    """The toward-BP probes of one method (ours): credit mix over ``config.alphas``, BP warm start.

    Writes ``out/probes_{method}.json``/``.md`` and ``credit_mix_{method}.png``; the card is the Markdown.
    """
    from .report.toward_bp import credit_mix_figure, credit_mix_md, warm_start_md

    out = Path(out)
    check_output_dir(out, subdirs=("warm_start",))
    other_kind(out, "probes")  # (an audit's, a train's or a ladder's folder: refused before any cell is listed)
    base, tag, log, argv = config.base, config.tag, _log(progress), argv or ["depthaudit.probes"]
    data = _data(base, data)
    config = replace(config, base=_fit_batch(base, data, progress))
    base = config.base
    check_probe_fits(config.probe_batch_size, data)
    opts = _sweep(sweep, out, base.device)
    plan = (fitted_probe_batches(data, config.probe_batches, config.probe_batch_size), config.probe_batch_size)
    ident = config.identity(plan, data.sha256)
    _buildable([base], data, opts)
    _not_foreign(out / f"probes_{tag}.json", [out / f"probes_{tag}.md", out / f"credit_mix_{tag}.png"])
    # the α sweep's store holds one configuration whatever the report's claim says: another one is refused here,
    # before the claim is taken over (walk 26 case 70: --replace-report was advised, then this store refused it)
    credit_mix_store(base, base.method, out, data.sha256, plan).check()
    if opts.cell is not None:  # a cell that is not in the grid: refused before the claim, as the audit's (walk 40
        pick_cell(credit_mix_specs(base, base.method, list(config.alphas), config.seeds, plan), opts.cell)  # W2)
    claim, fresh = None, not (out / f"probes_{tag}.identity.json").exists()
    if not opts.stored_only:  # this method's report in OUT belongs to one configuration: claimed under the folder's
        # lock before anything trains, a --cell's too (another method's probes sit beside it); a listing checks the
        # claim without writing it (walk 32 W3: another α grid was listed, and its cell trained); --stored-only
        # trains nothing and claims once every cell is found
        claim = claim_folder(out, "probes", ident, replace_report, name=f"probes_{tag}.identity.json",
                             dry=opts.list_cells)
        claim = None if opts.list_cells else claim
    try:
        cb = credit_mix_sweep(base, base.method, list(config.alphas), config.seeds, out, data, data.sha256, plan,
                              log=log, argv=argv, opts=opts)
    except UsageError:  # refused (e.g. its store holds another configuration): a claim this call made goes too
        if claim is not None and fresh:
            (out / f"probes_{tag}.identity.json").unlink(missing_ok=True)
        raise
    if isinstance(cb, SweepStatus):  # a cell listing or one cell: the sweep did what was asked, no report
        if opts.list_cells and config.pre_epochs > 0:  # the warm start's runs are listed too, as what they are
            store = warm_start_store(out, data)
            with nothing_trains():  # (the arms name checkpoints their pre-runs have not written yet)
                pre, arms = warm_start_specs(base, base.method, config.pre_epochs, config.seeds, out, plan)
            cb = replace(cb, stopped="\n".join([cb.stopped, *(
                f"-\t{s.key}\t{'done' if store.get(s, quiet=True) is not None else 'pending'}\tBP warm start, "
                "not a cell: trained in order by the command without --cell" for s in pre + arms)]))
        elif opts.cell is not None and config.pre_epochs > 0 and cb.stopped:  # the report needs the warm start too
            cb = replace(cb, stopped=cb.stopped.replace(
                "When every cell has finished, `depthaudit report OUT` (or the same command without --cell) writes",
                "When every cell has finished, the same command without --cell trains the BP warm start's runs "
                "(--pre-epochs: not cells, they need BP's checkpoint) and writes").replace(
                "When every cell has finished, the same call without cell= writes",
                "When every cell has finished, the same call without cell= trains the BP warm start's runs "
                "(pre_epochs: not cells, they need BP's checkpoint) and writes"))
        return Result.stopped_sweep(out, cb)
    parts = [f"# Probes (ours): {config.label}, {base.dataset} {base.arch} d={base.d_hidden} L={base.num_blocks}, "
             f"{budget_text(base.to_dict())}, seeds {list(config.seeds)}", "", "## Credit mix (ours)", "",
             credit_mix_md(cb), "",
             f"![credit mix](credit_mix_{tag}.png)", ""]
    res = {"schema": "depthaudit.probes.v1", "credit_mix": cb}
    if config.pre_epochs > 0:
        res["warm_start"] = bp_warm_start(base, base.method, config.pre_epochs, config.seeds, out, data, plan,
                                          log=log, argv=argv, stored_only=opts.stored_only)
        more = (f"{base.epochs} more" if base.stop_after is None else
                f"the first {base.stop_after} of {base.epochs} more (--stop-after)")
        parts += [f"## BP warm start (ours; BP for {config.pre_epochs} epochs, then {more})", "",
                  warm_start_md(res["warm_start"]), ""]
    if claim is None and opts.stored_only:
        claim = claim_folder(out, "probes", ident, replace_report, name=f"probes_{tag}.identity.json")
    # what the probes ran (the resolved config, as every result file carries it) and where (walk 17 case 109)
    res["config"] = {**{k: list(v) if isinstance(v, tuple) else v for k, v in (
        ("method", config.label), ("alphas", config.alphas), ("pre_epochs", config.pre_epochs),
        ("seeds", config.seeds), ("probe", plan))}, "base": base.to_dict()}
    res["provenance"] = provenance(torch.device(base.device), data.provenance(), config.seeds[0], argv)
    md = "\n".join(parts)
    with still_owner(out, claim), staged(out) as tmp:  # JSON, table and figure: all of them or none
        credit_mix_figure(cb, tmp / f"credit_mix_{tag}.png")
        write_json(tmp / f"probes_{tag}.json", res)
        write_text(tmp / f"probes_{tag}.md", md)
    return Result(out / f"probes_{tag}.json", _as_written(out / f"probes_{tag}.json", res), md, md,
                  [out / f"credit_mix_{tag}.png"])


@_api_call
def saturation(config: SaturationConfig, out: str | Path, *, data=None, sweep=None, progress: bool = True,
               argv: list[str] | None = None) -> Result:
    """A depth sweep: AG, AGmax, V and the gradient-matched insertion at every candidate, per depth.

    Trains base + N blocks for every N of ``config.extra`` (the ``hf`` family measures every pretrained model).
    Writes ``out/saturation_{family}_{data}.json`` (resumable: finished depths are reused), its ``.md`` and
    ``.png``; the result's card is the table ``depthaudit saturation`` prints. The family (``config.family``) is
    looked up in :data:`~depthaudit.experiments.families.FAMILIES`.
    """
    family = FAMILIES.get(config.family)
    out = Path(out)
    check_output_dir(out)
    other_kind(out, "saturation")  # (walk 31 W2, W3: a --cell wrote sweep.json, --list-cells listed, there)
    config = _family_check(family, config, "saturation", family.resolve)  # (its budget and rules: the config)
    _family_check(family, config, "saturation")
    data, name, sha = family.load(config, "saturation", data)
    if not family.pretrained:
        config = _fit_batch(config, data, progress)
    if not family.pretrained and hasattr(data, "x_test"):  # the analysis batches the split holds: what is measured
        n = (data.x_test if config.analysis_split == "test" else data.x_train).shape[0]  # is what is stored (walk 23
        fit = max(1, n // min(config.batch_size, n))  # W3: 1000 was stored, 15 measured, and 15 "differed")
        if config.analysis_batches > fit:
            _log(progress)(f"depthaudit: note: --analysis-batches {config.analysis_batches} × batch {config.batch_size}"
                           f" exceeds the {n} {config.analysis_split}-split examples; measuring (and recording) "
                           f"{fit} batches")
            config = replace(config, analysis_batches=fit)
    specs = config.specs()
    family.check_recipe(specs[0].cfg, data)
    if not family.pretrained:
        family.check_deepest(max((s.cfg for s in specs), key=lambda c: c.extra), data)
    opts = _sweep(sweep if sweep is not None else SweepOptions(log_dir=str(out / "logs")), out, config.device)
    store = family.saturation_store(config, out, name, sha)  # (its loggers checked above, before this claim)
    log = _log(progress)  # run_log too: a pretrained model's passes take minutes each, each stage is said
    status = run_sweep(specs, store, data=family.sweep_data(data) if opts.jobs == 1 else None,
                       argv=argv or ["depthaudit.saturation"], opts=opts, log=log, run_log=log)
    if not status.complete:
        return Result.stopped_sweep(out, status)  # (the folder: the file is not written yet, walk 31 case 144)
    if config.importance is not None or config.grow_steps:  # (hf: the depth-importance and growth tables)
        from .report.pretrained import write_importance

        write_importance(store)
    beyond = sorted(set(store.doc.get("runs") or {}) - {s.key for s in specs})
    if beyond:  # one file per configuration: its table holds the depths an earlier call added too
        _log(progress)(f"depthaudit: note: the table holds every run in {store.path.name}, also {len(beyond)} this "
                       f"call did not ask for ({', '.join(beyond[:4])}{' …' if len(beyond) > 4 else ''}); a separate "
                       "--out keeps sweeps apart")
    return _depth_result(store, "saturation", config.low_signal)


@_api_call
def grow(config: GrowConfig, out: str | Path, *, data=None, sweep=None, progress: bool = True,
         argv: list[str] | None = None) -> Result:
    """Function-preserving growth vs scratch: grow base → base + ``config.extra`` blocks, and train it from scratch.

    The grown arm inserts zero-output blocks at the epochs of ``config.insert_at``; the scratch arm trains the same
    final architecture for the same budget.
    Writes ``out/grow_{name}_{dataset}.json`` (both arms; resumable), its ``.md`` and ``.png``; the card is the
    table ``depthaudit grow`` prints.
    """
    family = FAMILIES.get(config.family)  # (the config resolved its budget and schedule and checked its rules)
    out = Path(out)
    check_output_dir(out)
    other_kind(out, "grow")  # (walk 31 W2, W3: a --cell wrote sweep.json, --list-cells listed, there)
    sched = config.schedule()
    config = _family_check(family, config, "grow", family.resolve)
    _family_check(family, config, "grow")
    data, _, _ = family.load(config, "grow", data)
    config = _fit_batch(config, data, progress)
    specs = [RunSpec(arm, config.arm(arm), runner=run_arm) for arm in ("grown", "scratch")]
    family.check_recipe(specs[1].cfg, data)
    ident = {"dataset": config.dataset, "data_sha256": data.sha256, "extra": config.extra, "epochs": config.epochs,
             "insert_at": list(sched), "seed": config.seed, **family.grow_identity(config)}
    if config.stop_after is not None:  # (absent when not given: earlier files stay the same file)
        ident["stop_after"] = config.stop_after
    defaults = {f.name: f.default for f in fields(config)}  # the recipe, each absent at its default (same file)
    defaults["batch_size"] = family.default_batch_size
    ident.update({k: getattr(config, k) for k in ("lr", "weight_decay", "batch_size")
                  if getattr(config, k) != defaults[k]})
    store = FileStore(out / f"grow_{family.grow_name(config)}_{config.dataset}.json", "depthaudit.grow.v1", ident)
    opts = _sweep(sweep if sweep is not None else SweepOptions(log_dir=str(out / "logs")), out, config.device)
    log = _log(progress)
    status = run_sweep(specs, store, data=data if opts.jobs == 1 else None, argv=argv or ["depthaudit.grow"],
                       run_log=log, opts=opts, log=log)
    if not status.complete:
        return Result.stopped_sweep(out, status)  # (the folder: the file is not written yet, walk 31 case 144)
    return _depth_result(store, "grow")


def _family_check(family, config, command: str, call=None):
    """The family's refusal of a flag it does not use (``call``: its check), as a ConfigError naming the field.

    (walk 19 case 164: ``SaturationConfig(family="resmlp", text=…)`` was a plain UsageError in CLI words.) Each
    ``--flag`` of the config in the family's line becomes its ``{field}``: a keyword from Python, the flag on the CLI.
    """
    import re

    try:
        return (call or family.check)(config, command)
    except ConfigError:
        raise
    except UsageError as exc:
        names = {f.name for f in fields(config)}

        def field_of(m: re.Match) -> str:
            name = m.group(1).replace("-", "_")
            return f"{{{name}}}" if name in names else m.group(0)

        raise ConfigError(re.sub(r"--([a-z][a-z0-9-]*)", field_of, str(exc))) from None


def _depth_result(store, kind: str, low_signal: float = 5e-3) -> Result:
    """The sweep's table, figure and .md next to its JSON (every family; the family picks the layout)."""
    from .report.saturation import grow_figure, grow_md, grow_title, saturation_figure, saturation_md, saturation_title

    store.assemble()  # with --jobs N the runs were stored by worker processes: this process's doc had none of them
    png = store.path.with_suffix(".png")  # (walk 19 cases 138, 139, 199: an empty table, card and figure)
    with file_lock(store.path.with_suffix(".lock")):  # rendered from the JSON as it is under the lock that
        store.assemble_locked()  # assembles it and that `depthaudit report` renders under (walk 28 W4)
        if kind == "grow":
            table, title = grow_md(store.doc), grow_title(store.doc)
            grow_figure(store.doc, png)
        else:
            table, title = saturation_md(store.doc), saturation_title(store.doc)
            saturation_figure(store.doc, png, low_signal)
        md = f"# {title}\n\n{table}\n\n![{kind}]({png.name})\n"
        write_text(store.path.with_suffix(".md"), md)
    return Result(store.path, _as_written(store.path, store.doc), table, md, [png])


@_api_call
def identity(config: TrainConfig, seeds=(42, 123, 456), *, probe_batches: int = 10, probe_batch_size: int = 128,
             data=None, out: str | Path | None = None, progress: bool = True) -> Result:
    """The frozen-init identity check over seeds (SPEC §1's calibration), optionally written to ``out`` (.json).

    ``progress`` is taken like every API function's (the check trains nothing and shows no bar).
    """
    if config.num_blocks < 1:
        raise ConfigError("{num_blocks} 0: the identity check measures residual blocks; give at least 1")
    whole = numbers.Integral  # (a numpy or torch integer is a seed too, as the configs take it: walk 34 W2)
    one = isinstance(seeds, whole | str | bytes) or not hasattr(seeds, "__iter__") or getattr(seeds, "ndim", 1) == 0
    seeds = [seeds] if one else list(seeds)  # (seeds=1: one seed; any iterable, a range, a generator, an array)
    bad = next((s for s in seeds if not isinstance(s, whole) or isinstance(s, bool)), None)
    if not seeds or bad is not None:
        raise ConfigError(f"{{seeds}} must be one or more integer seeds (e.g. 42), got "
                          f"{'none' if not seeds else f'{type(bad).__name__} {bad!r}'}")
    seeds = list(dict.fromkeys(int(s) for s in seeds))
    if (out_of := next((s for s in seeds if not 0 <= s <= 2**63 - 1), None)) is not None:
        raise ConfigError(f"{{seeds}} must be in 0..2**63-1, got {out_of}")
    for name, v, lo in (("probe_batches", probe_batches, 1), ("probe_batch_size", probe_batch_size, 2)):
        if not isinstance(v, whole) or isinstance(v, bool) or v < lo:
            raise ConfigError(f"{{{name}}} must be an integer >= {lo}, got {v!r}")
    probe_batches, probe_batch_size = int(probe_batches), int(probe_batch_size)
    usable_device(config.device)
    before = None
    if out is not None:  # only a file of its own is replaced (an audit's report.json, a ladder's JSON are not)
        before = _check_identity_target(Path(out))
    data = _data(config, data)
    check_probe_fits(probe_batch_size, data)
    check_fits(config, data)  # (a model this machine cannot hold: one line, not a swapping machine)
    n = probe_batches * probe_batch_size
    if n > data.x_test.shape[0]:
        raise ConfigError(f"{{probe_batches}} {probe_batches} × {{probe_batch_size}} {probe_batch_size} = {n} exceeds "
                          f"the {data.x_test.shape[0]} held-out examples of {config.dataset}; ask for fewer")
    x, y = probe_batch(data, seeds[0], n)
    res = identity_over_seeds(config, data.input_shape, data.num_classes, seeds, x, y, probe_batch_size)
    res["summary"] = identity_summary(res["per_seed"], config.num_blocks)
    card = identity_card(config, res["summary"], x.shape[0], seeds, probe_batch_size)
    record = {"schema": IDENTITY_SCHEMA, "config": _at_init(config).to_dict(), **res,
              "provenance": provenance(x.device, data.provenance(), seeds[0], ["depthaudit.identity"])}
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        with folder_lock(Path(out).parent):  # (two checks into one file at once: walk 40 case 165, one result lost)
            now = _check_identity_target(Path(out))  # read again: another check may have written it meanwhile
            meanwhile = _identity_changes(now, record) if now is not None and now != before else []
            if meanwhile:
                raise ConfigError(f"{{out}} {out} was written by another identity check while this one ran (it "
                                  f"differs in {', '.join(meanwhile[:6])}); it is kept and this "
                                  "check's result is not written: rerun with another {out}")
            write_json(Path(out), record)
        diff = _identity_changes(before, record) if before is not None else []
        if diff:
            print(f"depthaudit: note: replaced {out}, the identity check of another configuration (it differed in "
                  f"{', '.join(diff[:6])})", file=sys.stderr)
    return Result(Path(out) if out is not None else None, record, card)  # (not Path("."): nothing was written)


IDENTITY_SCHEMA = "depthaudit.identity_check.v1"


def _identity_changes(old: dict, record: dict) -> list[str]:
    """Where a stored identity check differs from ``record`` in what it measures (config fields, then ``seeds``).

    Training's flags (idle at init, noted) make no other check (walk 19 cases 123, 124).
    """
    idle = {f.name for f in fields(TrainConfig) if f.metadata.get("training")} | {"method", "method_options"}
    was, now = old.get("config") or {}, record["config"]
    diff = sorted(k for k in set(was) | set(now) if k not in idle and was.get(k) != now.get(k))
    return diff + (["seeds"] if old.get("seeds") != record.get("seeds") else [])


def _at_init(config: TrainConfig) -> TrainConfig:
    """``config`` as the identity check ran it: training's settings and the method, idle at init, at their defaults.

    The config stores what ran (cli.md): ``--epochs 3`` given to identity (noted as having no effect) is not stored
    as if 3 epochs had trained (walk 33 case 63).
    """
    idle = {f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
            for f in fields(TrainConfig) if f.metadata.get("training") or f.name in ("method", "method_options")}
    return replace(config, **idle)


def _check_identity_target(out: Path) -> dict | None:
    """``out`` may be replaced only when absent or an identity check's own JSON (of this schema or none older).

    Returns the check ``out`` holds (None: none), so that replacing one of another configuration is said.
    """
    if out.is_symlink() and not out.exists():  # (walk 20 W3: a link loop, or a link to nothing, was replaced
        loop = link_loops(out)  # by a file: the link was lost)
        raise ConfigError(f"{{out}} {out} is " + (f"a loop of symbolic links ({out} → {os.readlink(out)} → …); remove "
                          "one of the links" if loop else f"a symbolic link to {os.readlink(out)}, which does not "
                          "exist; give the file's own path") + ", or choose another {out}")
    if not out.exists():
        return None
    if out.is_dir():  # (walk 17 case 115: an empty folder was called another command's file)
        raise ConfigError(f"{{out}} {out} is a folder; give a .json file path (e.g. "  # (not identity.json: a
                          f"{out / 'identity_check.json'})")  # results folder's claim, walk 31 W5)
    try:
        doc = json.loads(out.read_text(encoding="utf-8")) if out.is_file() else None
    except (OSError, ValueError, UnicodeDecodeError):
        raise ConfigError(f"{{out}} {out}: it exists and cannot be read as JSON (a damaged or truncated result, or a "
                          "file of your own); move it away or choose another {out}") from None  # (walk 20 case 135)
    ours = isinstance(doc, dict) and (doc.get("schema") == IDENTITY_SCHEMA
                                      or ("schema" not in doc and {"config", "per_seed", "summary"} <= set(doc)))
    if not ours:
        whose = "another command's file" if our_doc(doc) else "a file of your own"  # (walk 20 case 132)
        raise ConfigError(f"{{out}} {out}: it exists and is not an identity check's result ({whose}); "
                          "choose another {out}")  # (walk 15 case 274, walk 17 case 115: each in its own words)
    return doc


def identity_card(cfg: TrainConfig, summ: dict, n: int, seeds: list, bs: int) -> str:
    """The identity table beside SPEC §1's calibration figures (the reference model on CIFAR-10)."""
    family = cfg.arch == "resmlp" and cfg.variant == "ref" and cfg.dataset == "cifar10"
    ref = family and cfg.d_hidden == 256 and cfg.num_blocks == 4 and cfg.mlp_ratio in (None, 1)  # SPEC §1's model
    # (walk 15 cases 175, 177: its figures were printed beside any width and depth)
    rows = [(f"block {i + 1}: |f_l(h_(l-1))|/|h_(l-1)|", v, "~0.10") for i, v in enumerate(summ["block_ratio"])]
    rows += [("stack: |h_L - h_0|/|h_0|", summ["stack_rel_change"], "0.196 ± 0.003"),
             ("stack: cos(h_L, h_0)", summ["stack_cos"], "0.981 ± 0.001")]
    rows += [("per example, mean: |h_L - h_0|/|h_0| (ours)", summ["per_example_stack_rel_change"], ""),
             ("per example, mean: cos(h_L, h_0) (ours)", summ["per_example_stack_cos"], "")]
    rows += [(f"median per-example |h_{i}|", v, "~9") for i, v in enumerate(summ["stream_median_norm"])]
    if "g_L_median" in summ:
        rows.append((f"D2 |g_L| (mean loss, batch {bs}), median", summ["g_L_median"], "~8e-3"))
    lines = [f"identity at init: {cfg.arch} ({cfg.variant}) d={cfg.d_hidden} L={cfg.num_blocks}, {cfg.dataset}, "
             f"{n} held-out examples, seeds {seeds}",
             "  block and stack ratios over the whole held-out tensor (the calibration's form); "
             "per-example means below",
             f"  {'quantity':44s} {'measured (mean ± std over seeds)':34s}" + (" SPEC §1 reference" if ref else "")]
    lines += [f"  {name:44s} {fmt_ms(ms, '.2e' if name.startswith('D2') else '.4f'):34s}" + (f" {spec}" if ref else "")
              for name, ms, spec in rows]
    if family and not ref:
        lines.append("  (SPEC §1's reference figures are for the reference ResMLP at d=256, L=4, mlp ratio 1: not "
                     "shown beside this shape)")
    return "\n".join(lines)


def check_probe_fits(batch_size: int, data) -> None:
    """A probe batch must fit the held-out split (checked once the data is loaded, before any run starts)."""
    n = data.x_test.shape[0]
    if n < 2:  # no probe batch fits (B_p >= 2): the data, not a flag (walk 24 W8: "use at most 1", then refused)
        from .plugins import defined_at

        where = (f" (its loader: {defined_at(DATASETS.get(data.name))})" if data.name in DATASETS and not getattr(
            DATASETS.get(data.name), "__module__", "").startswith("depthaudit.") else "")
        raise UsageError(f"--dataset {data.name}{where} has {n} held-out example{'s' * (n != 1)}; a probe batch needs "
                         "at least 2 (its mean-loss reference): fix the data or its loader")
    if batch_size > n:
        raise ConfigError(f"{{probe_batch_size}} {batch_size} exceeds the {n} held-out examples; use at most {n}")


def audit_identity(acfg: AuditConfig, data_sha256: str) -> dict:
    """What an audit folder's report belongs to: the audit config (not where the data was read from) and the data."""
    d = acfg.to_dict()
    # fields added later, at the value earlier audits ran with, are left out: a folder claimed before they existed
    # is still this audit's (as run names leave them out, TrainConfig.identity_dict)
    d["base"] = {k: v for k, v in d["base"].items() if k not in ("data_dir", "download")
                 and not (k in NAME_NEUTRAL and v == NAME_NEUTRAL[k])}
    return {**d, "data_sha256": data_sha256}


def same_audit(out: Path, acfg: AuditConfig, replace_report: bool) -> None:
    """Refuse to overwrite the report of a different audit configuration in ``out`` (its runs are kept anyway).

    A file of the report's names that depthaudit did not write (a user's own ``report.md`` or picture) is
    refused too, before anything trains: it is never written over.
    """
    foreign = foreign_report_file(out)
    if foreign is not None:
        raise UsageError(f"{foreign} exists and {not_ours_why(foreign)} (the audit writes its report there); move "
                         "it away or choose another --out")
    for name in REPORT_FILES:  # a FIFO, device or folder where a report file goes: refused before anything trains
        check_replaceable(out / name)  # (walk 26 case 36: after the runs had trained)
        if (out / name).is_dir():
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(out / name))
    try:
        doc = json.loads((out / "report.json").read_text(encoding="utf-8"))
        old = doc.get("config")
    except (OSError, ValueError, AttributeError):
        return  # no report (or an unreadable one, which the report command names): nothing to protect
    new = json.loads(json.dumps(acfg.to_dict()))
    if isinstance(old, dict) and _monitors(doc):  # no runs/ stand behind a TrainingMonitor's report to rebuild it
        # (walk 41 case 183: the advice said "the runs of both stay in runs/", and following it lost the report)
        raise UsageError(f"{out}/report.json is a TrainingMonitor's report (of your own training loop): no run "
                         "record stands behind it, so no audit replaces it, not even with --replace-report; use "
                         "another --out")
    if not isinstance(old, dict) or replace_report:
        return
    n = ((doc.get("provenance") or {}).get("data") or {}).get("n_train")  # compared as it would train (and be
    b = new["base"]  # stored) on the split, before the data is read (walk 24 W2, W3)
    if isinstance(n, int) and isinstance(b.get("batch_size"), int) and n > 0 and "warmup" in b:
        b["batch_size"], b["warmup"], b["warmup_fraction"] = _fitted_recipe(
            n, b["batch_size"], b["warmup"], b["warmup_fraction"], b.get("epochs"))
    # (the base's seed is the first of the seeds: the same seeds in another order are the same audit, walk 15 case 288)
    where = lambda d: {k: v for k, v in d.items() if k not in ("data_dir", "download", "seed")}  # noqa: E731
    old_base = _comparable_base(old.get("base") or {})
    new_base = _comparable_base(new["base"])
    diff = sorted({k for k in set(old) | set(new) if k != "base" and old.get(k) != new.get(k)}
                  | {k for k in set(where(old_base)) | set(where(new_base)) if old_base.get(k) != new_base.get(k)})
    diff = [k for k in diff if k not in ORDERLESS or identity_diff({k: old.get(k)}, {k: new.get(k)})]
    if diff and grows(old, new, diff):  # more methods or seeds: the report grows to cover them (runs reused)
        return
    if diff:  # (the same methods or seeds in another order: the same runs, the rows reordered)
        more = add_hint(diff, old, new) if set(diff) <= set(ORDERLESS) else ""
        raise UsageError(f"{out}/report.json is the report of another audit (differs in {', '.join(diff[:6])}){more}; "
                         "use another --out, or --replace-report (replace_report=True) to overwrite it (the runs of "
                         "both stay in runs/)")


def _monitors(doc: dict) -> bool:
    """Whether a ``report.json`` is a :class:`~depthaudit.evaluator.TrainingMonitor`'s (its data: the probe batches)."""
    data = (doc.get("provenance") or {}).get("data") if isinstance(doc.get("provenance"), dict) else None
    return isinstance(data, dict) and data.get("source") == "the probe batches given to TrainingMonitor"


def _comparable_base(d: dict[str, Any]) -> dict[str, Any]:
    """A stored base config in today's form (the records' flat option fields read back into ``method_options``)."""
    try:
        return TrainConfig.from_dict(d).to_dict()
    except (TypeError, UsageError):
        return d
