"""`depthaudit ladder` and `report`: the depth-utility ladder and rebuilding reports from JSON."""

# imports inside functions: torch/matplotlib modules where used (`--help` loads neither); jsonschema: test extra
import argparse
import json
import os
import shlex
import sys
from pathlib import Path

from .. import api
from ..errors import UsageError, cli_message
from ..experiments.ladder import LadderConfig, placed_in_ladder
from ..io import (
    check_output_dir,
    environment_error,
    foreign_json,
    foreign_report_file,
    foreign_table_file,
    link_loops,
    our_doc,
    staged,
    write_json,
    write_text,
)
from ..report import audit_markdown, audit_terminal
from ..report.card import unrendered_note
from ..report.verified import (
    read_json_doc,
    rendering,
    verified_intervention,
    verified_report,
)
from ..stores import (
    SEAL,
    FileStore,
    file_lock,
    identity_diff,
    misplaced_runs,
    orphan_problem,
    rebuild_file_store,
    record_problem,
    records_claim,
    seal,
    seal_problem,
)
from . import COMMANDS, run_command
from .args import (
    ASSEMBLING,
    add_train_args,
    building,
    config_from_args,
    dedup_note,
    out_arg,
    out_spelling,
    remember_sweep,
    shallow_args,
    shallow_blocks,
    sweep_args,
    sweep_options,
)
from .parser import NONNEG_INT, add_fields, given


def cmd_ladder(a: argparse.Namespace, argv: list[str]) -> int:
    """Depth-utility ladder (:func:`depthaudit.ladder`): the last k blocks for every k, method and seed."""
    if a.gpu is not None:
        if a.device not in (None, "auto", f"cuda:{a.gpu}"):
            raise UsageError(f"--gpu {a.gpu} and --device {a.device} disagree; give one of them")
        a.device = f"cuda:{a.gpu}"
    check_audit_dir(a.audit_dir)
    a.methods = a.methods or list(LadderConfig.methods)
    a.seeds = a.seeds or list(LadderConfig.seeds)
    base = config_from_args(a)
    check_output_dir(a.output_dir, out_spelling(argv, "--output_dir"))  # (the user's spelling: walk 27 case 109)
    if a.k_values is not None:
        dedup_note(a.k_values, "--k-values")
    dedup_note(a.seeds, "--seeds")
    with building(a):  # k-values (default 0..L) and every rule are the config's own
        lc = LadderConfig(base=base, **given(a, LadderConfig), shallow_blocks=shallow_blocks(a))
    opts = sweep_options(a, a.output_dir, base.device)  # bad sweep flags: one line, before any work
    if opts.cell is not None:
        opts = remember_sweep(opts, a.output_dir, argv)
    res = api.ladder(lc, a.output_dir, sweep=opts, audit_dir=a.audit_dir, verbose=a.verbose,
                     argv=["depthaudit", *argv])
    print(res.card)
    if res.stopped:
        return 0
    print(f"\nwrote {res.path}, {res.path.with_suffix('.md')} and {res.path.with_suffix('.png')}")
    return 0


def cmd_report(a: argparse.Namespace, argv: list[str]) -> int:
    """Rebuild every table and figure in DIR and in its subfolders from their saved JSON, without training."""
    d = Path(a.dir)
    if not d.is_dir():
        links = [q for q in (Path(*d.parts[:i + 1]) for i in range(len(d.parts))) if q.is_symlink() and not q.exists()]
        why = None if d.exists() or not links else (  # (walk 28 case 143: a loop or dangling link was unsaid)
            f"{links[0]} is a loop of symbolic links" if link_loops(links[0]) else
            f"{links[0]} is a symbolic link to {os.readlink(links[0])}, which does not exist")
        what = "is not a folder" if d.exists() or why else "does not exist"  # (walk 32 case 60: it said "not a folder")
        raise UsageError(f"{d} {what}{f' ({why})' if why else ''}; pass the --out/--output_dir of an audit "
                         "or ladder")
    top = d.resolve()
    if top == Path(top.anchor) or top.parts[:2] in (("/", "proc"), ("/", "sys"), ("/", "dev")):
        # (walk 19 case 102: `report /` walked the whole file system into /proc and blamed /proc/1/cwd)
        raise UsageError(f"{d} is {'the file system root' if top == Path(top.anchor) else 'a system folder'}, "
                         "not a results folder; pass the --out/--output_dir of an audit or ladder (or a folder "
                         "of them)")
    check_audit_dir(a.audit_dir)
    skip = ("runs", "logs", "slurm")  # an audit's run folders, live logs, scheduler logs: nothing to render
    dirs = [d, *sorted(p for p in d.rglob("*") if p.is_dir() and not p.name.startswith(".")
                       and not p.name.endswith(".runs") and not any(x in skip for x in p.relative_to(d).parts)
                       and not _warm_start_of_probes(p))]
    for kind in ("ladder_*.json", "saturation_*.json", "grow_*.json", "report.json", "intervention.json"):
        for f in sorted(d.glob(f"**/{kind}")):  # results put inside a run store or a log folder: said, not rendered
            rel = f.relative_to(d).parts[:-1]
            if any(x in skip for x in rel) and not any(x.endswith(".runs") for x in rel):
                print(f"depthaudit: note: skipped {f}: it lies inside {d / rel[0]} (a run store or log folder, "
                      "which report does not render); move it to a folder of its own", file=sys.stderr)
    if a.audit_dir and not any(next(sub.glob("ladder_*.json"), None) for sub in dirs):
        print(f"depthaudit: note: --audit-dir has no effect here: {d} holds no ladder (it cross-checks a ladder's "
              "k=L rung against the audit)", file=sys.stderr)
    found, skipped = 0, []
    for sub in dirs:
        if (sub / "sweep.json").is_file() and foreign_json(sub / "sweep.json"):
            print(f"depthaudit: note: {sub / 'sweep.json'} is not depthaudit's; it is left alone", file=sys.stderr)
        elif (sub / "sweep.json").exists():  # cells ran separately (--cell): assemble them with the sweep's command
            try:
                rc = _assemble_cells(sub)
            except UsageError as exc:  # a subfolder's unfinished or refused sweep: skipped and named, as a damaged
                if "cells are not finished" in str(exc) and _kept_command(sub) == "intervene" \
                        and (sub / "intervention.json").is_file():  # the report of another λ grid, finished
                    # in the folder after its --cell sweep began (intervene lets one grid replace another's
                    # report): rendered, the unfinished sweep named (walk 42 W1: refused, and the advice reran
                    # the stale grid over it)
                    print(f"depthaudit: note: {sub}: the --cell sweep kept in {sub / 'sweep.json'} is not finished "
                          f"({cli_message(exc).split(' (or rerun')[0]}); rendering the intervention report the "
                          "folder holds, written by a later command (its λ grid is in the table)", file=sys.stderr)
                    rc = None
                elif sub == d:  # one is, and the folders after it still rendered (walk 39 W1: the report stopped
                    raise  # there, the rest neither rendered nor named)
                else:
                    print(f"depthaudit: note: skipped {sub}: {cli_message(exc)}", file=sys.stderr)
                    skipped.append(sub)
                    continue
            if rc is not None:  # (None: rendered below from the folder's own files)
                if rc and sub == d:
                    return rc
                if rc:
                    skipped.append(sub)
                    continue
                found += 1  # (assembled and printed by the sweep's own command: probes write no report.json)
        try:
            n = _report_dir(sub, a)
        except Unrendered as part:  # (walk 18 case 94: a folder where a JSON must be ended the whole report)
            whys = [cli_message(e) if isinstance(e, UsageError) else environment_error(e) for e in part.errors]
            if None in whys:  # an error of the machine no line names: as it is
                raise part.errors[whys.index(None)] from None
            if len(dirs) == 1 and len(whys) == 1:  # one folder, no subfolders: its one refusal is the error
                raise part.errors[0] from None
            for why in whys:  # one bad file, not the folder, not all (walk 40 W1)
                print(f"depthaudit: note: {f'not rendered in {sub}' if part.rendered else f'skipped {sub}'}: {why}",
                      file=sys.stderr)
            if part.rendered and sub != d:
                print(f"(from {sub})\n")
            found += part.rendered
            skipped.append(sub)
            continue
        if n and sub != d:
            print(f"(from {sub})\n")
        elif not n and sub != d:  # a folder of ours with nothing report renders (probes, an
            held = _what_it_holds(sub)  # unfinished audit): said, not passed over (walk 16 case 41)
            if held != "pass a folder depthaudit wrote" and not held.startswith("it is the run store"):
                print(f"depthaudit: note: not rendered: {sub}: {held}", file=sys.stderr)
        found += n
    if skipped:  # the others are rendered, but `report DIR && publish` must not go on as if all were
        names = ", ".join(str(s) for s in skipped[:3]) + (", …" if len(skipped) > 3 else "")
        raise UsageError(f"{len(skipped)} folder(s) could not be rendered ({names}: each named above with its "
                         f"fix); {found or 'no'} result(s) were rendered")  # (walk 40 case 186: the line
        # ended "were"; 194: a folder with nothing else was said to hold no finished run)
    if not found:
        raise UsageError(f"{d} holds no ladder_*, saturation_*, grow_*, intervention.json or report.json with a "
                         f"finished run (nor do its subfolders); {_what_it_holds(d)}")
    return 0


def _nothing_yet(path: Path, doc: dict) -> bool:
    """Whether ``path`` holds no finished run (its sweep interrupted before one finished): said, not rendered empty."""
    if doc.get("runs"):
        return False
    print(f"depthaudit: note: {path} holds no finished run yet (its command was interrupted before one finished, "
          "or still runs): nothing to render; rerun that command to train", file=sys.stderr)
    return True


def _users_own(f: Path) -> bool:
    """Whether ``f`` (a results file's name) holds a user's own JSON object (valid, no depthaudit schema or shape).

    (A file that is not valid JSON may be a damaged one of ours: it is named as damaged, not passed over.)
    """
    if not f.is_file():
        return False
    try:
        doc = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and not our_doc(doc) and not ("identity" in doc and "runs" in doc)  # (a store
    # older than schemas has both: ours, checked as such)


class Unrendered(Exception):
    """Files of one folder that could not be rendered (``errors``), after ``rendered`` results of it were."""

    def __init__(self, errors: list[BaseException], rendered: int):
        super().__init__(str(errors[0]))
        self.errors, self.rendered = errors, rendered


def _mine(json_path: Path, others=None) -> None:
    """Refuse to re-render where a user's own file sits under a name of the result's table or figure."""
    foreign = foreign_table_file(json_path, others)
    if foreign is not None:
        raise UsageError(f"{foreign} exists and is not depthaudit's (report rewrites the results' files there); "
                         "move it away and rerun")


def _warm_start_of_probes(p: Path) -> bool:
    """Whether ``p`` (or a folder above it, below the probes') is a probes folder's ``warm_start`` store."""
    return any(q.name == "warm_start" and next(q.parent.glob("probes_*"), None) is not None
               for q in (p, *p.parents))


def _what_it_holds(d: Path) -> str:
    """The fix for a folder with nothing to render, from what it does hold (its claim, a train's or probes' files)."""
    cards = sorted(p.name for p in d.glob("probes_*.md"))
    if cards:  # the probes' card is their Markdown, written with the figure by the command itself
        return f"it holds probes results: their card is {', '.join(cards)} (rerun `depthaudit probes` to rewrite it)"
    if (d / "result.json").is_file():
        return "it holds one training (result.json, read it directly); report renders audits, ladders and sweeps"
    if d.name.endswith(".runs") and (d.parent / (d.name[:-5] + ".json")).is_file():  # a ladder's or depth sweep's
        up = d.resolve().parent  # run store (walk 16 cases 160, 161)
        if d.name.startswith("credit_mix_"):  # the probes' (walk 17 case 10): report renders no probes, their card
            return (f"it is the run store of the probes in {up}: their card is its probes_*.md, written by the "
                    f"probes command (rerun it with --out {up} to finish or rewrite it; finished runs are reused)")
        return f"it is the run store of {up / (d.name[:-5] + '.json')}: depthaudit report {up}"
    if d.resolve().name == "warm_start" and next(d.resolve().parent.glob("probes_*"), None) is not None:
        up = d.resolve().parent  # the probes' BP warm start (walk 22 W1: "rerun the audit with --out …/warm_start")
        return (f"it is the BP warm start's store of the probes in {up}: their card is its probes_*.md, written by "
                f"the probes command (rerun it with --out {up} to finish or rewrite it; finished runs are reused)")
    claims = sorted(p.name for p in d.glob("probes_*.identity.json"))
    if claims:  # probes stopped before their card was written (walk 16 case 54)
        return (f"it holds probes that have no card yet ({claims[0]}): rerun the probes command with --out {d} "
                "(finished runs are reused) to write it")
    if d.resolve().name == "runs" and ((d / ".." / "identity.json").is_file() or (d / ".." / "sweep.json").is_file()):
        up = d.resolve().parent  # (walk 15 case 46: an audit's run store was told to pass a folder depthaudit wrote)
        return f"it is the run store of the sweep in {up}: depthaudit report {up}"
    try:
        kind = read_json_doc(d / "identity.json").get("kind") if (d / "identity.json").is_file() else None
    except (OSError, UsageError, AttributeError):
        kind = None
    if kind in ("audit", "intervene") or (kind is None and (d / "runs").is_dir()):  # its report was never written
        # (interrupted) or was removed: the stored runs rebuild it
        return (f"its {kind or 'audit or intervene'} report is missing: rerun the {kind or 'audit or intervene'} "
                f"command with --out {d} to write it (its finished runs are reused; only runs not yet stored train)")
    started = sorted(p.name for pat in ("ladder_*.json", "saturation_*.json", "grow_*.json") for p in d.glob(pat))
    if started:  # a sweep stopped before its first run finished (walk 15 case 153: told it was no folder of ours)
        flag = "--output_dir" if started[0].startswith("ladder_") else "--out"
        return (f"its sweep ({started[0]}) has no finished run yet: rerun the command that started it with {flag} "
                f"{d} (it resumes there)")
    return "pass a folder depthaudit wrote"


def _kept_command(d: Path) -> str | None:
    """The command (``intervene``, ``audit``, …) a folder's ``sweep.json`` keeps, else None."""
    try:
        cmd = read_json_doc(d / "sweep.json").get("argv")
    except (OSError, UsageError, AttributeError):
        return None
    rest = [t for t in cmd if isinstance(t, str)] if isinstance(cmd, list) else []
    while rest and rest[0].startswith("--plugin"):
        rest = rest[1:] if "=" in rest[0] else rest[2:]
    return rest[0] if rest else None


def _assemble_cells(d: Path) -> int:
    """Re-run the command kept in ``d/sweep.json`` with ``--stored-only``: its report, nothing trained."""
    sweep = read_json_doc(d / "sweep.json")
    cmd = sweep.get("argv") if isinstance(sweep, dict) else None
    sweeps = ("audit", "ladder", "intervene", "probes", "saturation", "grow")  # the commands that take --cell
    lead = []  # the global options before the command (--plugin MODULE, as given to the cells)
    while isinstance(cmd, list) and cmd and isinstance(cmd[0], str) and cmd[0].startswith("--plugin"):
        n = 1 if "=" in cmd[0] else 2
        lead, cmd = lead + cmd[:n], cmd[n:]
    if not isinstance(cmd, list) or not all(isinstance(t, str) for t in cmd) or not cmd or cmd[0] not in sweeps:
        raise UsageError(f"{d / 'sweep.json'} is damaged (it holds no sweep command); rerun the sweep's command "
                         "without --cell instead")
    flag = "--output_dir" if cmd and cmd[0] == "ladder" else "--out"
    kept = [t for i, t in enumerate(cmd) if t not in ("--out", "--output_dir")
            and not (i and cmd[i - 1] in ("--out", "--output_dir")) and not t.startswith(("--out=", "--output_dir="))]
    cmd = [*lead, *kept, flag, str(d)]  # the folder as it is now, wherever the sweep first wrote it (named once)
    print(f"assembling the finished cells: depthaudit {shlex.join(cmd)}", file=sys.stderr)  # (quoted: a path with
    # a space pastes as one argument, walk 37 W3)
    try:  # an edited report is rewritten from the records here: said, as the refusal without sweep.json says it
        sealed = json.loads((d / "report.json").read_text(encoding="utf-8"))  # (walk 25 case 88)
        edited = seal_problem(sealed) if isinstance(sealed, dict) and SEAL in sealed else None
    except (OSError, ValueError):
        edited = None
    if edited:
        print(f"depthaudit: note: {d / 'report.json'} {edited}; it is rewritten from the run records",
              file=sys.stderr)
    token = ASSEMBLING.set(True)
    try:
        return run_command([*cmd, "--stored-only"])
    except UsageError as exc:  # e.g. cells not finished; or cells added to a folder another command made
        exc = UsageError(cli_message(exc).replace(" — or drop --stored-only (stored_only=True) to train them now",
                                                  ""))  # (report has no such flag: walk 25 case 37; said below)
        if "holds the results of another command" in str(exc) or " belongs to another " in str(exc):
            kept_cmd = shlex.quote(str(d / "sweep.json"))  # (stale: walk 32 W2, rerunning it was refused)
            raise UsageError(f"{cli_message(exc)} — so {d / 'sweep.json'} names a command that can no longer "
                             f"write here (its folder now holds other results); remove {kept_cmd} to render what "
                             "the folder holds") from None
        if "cells are not finished" not in str(exc):  # an edited or damaged file: its own advice is the fix; no
            raise exc from None  # other command gets past it (walk 35 W4: the offered alternative was refused alike)
        if cmd[len(lead)] in ("audit", "intervene", "probes"):  # a report of all its runs or none: no partial
            again = shlex.join([*lead, *kept, flag, str(d)])  # one (walk 15 case 64: removing sweep.json rendered
            raise UsageError(f"{cli_message(exc)} (or rerun the command without --cell: depthaudit {again} "  # nothing)
                             "trains what is missing and writes the report)") from None
        raise UsageError(f"{cli_message(exc)} (or, to render what the files hold without that command, remove "
                         f"{shlex.quote(str(d / 'sweep.json'))})") from None
    finally:
        ASSEMBLING.reset(token)


def _report_dir(d: Path, a: argparse.Namespace) -> int:
    """Render what one folder holds; returns how many results it found."""
    from ..report.figures import audit_figures
    from ..report.ladder import ladder_report

    found = 0
    for kind in ("ladder", "saturation", "grow"):  # the JSON is derived: rebuilt from the records when missing
        for runs in sorted(d.glob(f"{kind}_*.runs")):
            if runs.is_dir() and not runs.with_suffix(".json").exists():
                if rebuild_file_store(runs) is None:
                    raise UsageError(f"{runs} holds run records but no identity.json, and "
                                     f"{runs.with_suffix('.json').name} is missing; rerun the {kind} command that "
                                     "wrote them (finished runs are reused)")
                print(f"depthaudit: note: rebuilt {runs.with_suffix('.json')} from the records in {runs}",
                      file=sys.stderr)

    def assembled(path: Path, kind: str) -> None:
        """Records a worker stored but did not assemble (killed between) join the JSON; a damaged one is refused.

        Without its records the JSON is the only copy: rendered only if it is as written (its seal holds; an
        earlier version's JSON, older than records and seals, is rendered as before).
        """
        runs = path.with_suffix(".runs")
        if runs.exists() and not runs.is_dir():
            raise UsageError(f"{runs} is not a folder (a file stands where {path.name}'s run records must be); move it "
                             f"away, then rerun the {kind} command that wrote {path.name} (its runs train again)")
        if not runs.is_dir():
            bad = orphan_problem(read_json_doc(path))
            if bad:
                raise UsageError(f"{path} {bad}, and its run records ({runs.name}) are missing, so nothing shows what "
                                 f"was measured; rerun the {kind} command that wrote it (its runs train again)")
            return
        moved = misplaced_runs(runs)  # (records of another file: named as moved, not the JSON as edited)
        if moved:
            raise UsageError(moved)
        doc = read_json_doc(path)
        marker = path.with_suffix(".runs") / "identity.json"
        truth = records_claim(path.with_suffix(".runs"))  # the sealed records' own place: it outranks both files
        if truth is not None and marker.is_file():
            own = read_json_doc(marker)
            diff = identity_diff(own.get("identity") or {}, truth["identity"])
            if own.get("schema") != truth["schema"] or diff:
                raise UsageError(f"{marker} differs from the sealed run records beside it (in: "
                                 f"{', '.join(diff[:6]) or 'schema'}): it was edited; move it away (it is rewritten "
                                 f"from the records), then rerun report")
        if marker.is_file():  # the records' own claim: a JSON that disagrees with it is the edited one
            own = read_json_doc(marker)
            diff = identity_diff(own.get("identity") or {}, doc.get("identity") or {})
            if own.get("schema") != doc.get("schema") or diff:
                raise UsageError(f"{path} differs from its records' claim {marker} (in: "
                                 f"{', '.join(diff[:6]) or 'schema'}): it was edited; move {path.name} away (report "
                                 "rebuilds it from the records)")
        store = FileStore(path, doc.get("schema"), doc.get("identity") or {}, log=lambda m: None)
        store.assemble()
        if store.damaged:
            where, bad = next(iter(store.damaged.items()))
            if not Path(where).is_file() and (Path(where).exists() or Path(where).is_symlink()):  # a FIFO, folder
                raise UsageError(f"{where} {bad}; no rerun replaces it: move it away, then rerun the {kind} command "
                                 f"that wrote {path.name} to train that run again (the others are reused)")  # (walk 26)
            raise UsageError(f"{where} {bad}; it is left out: rerun the {kind} command that wrote {path.name} "
                             "to train that run again (the others are reused), or, if it is not a run of that "
                             f"command's grid (the rerun says so), move it out of {path.with_suffix('.runs')}")

    def ladder_one(path: Path) -> str | None:
        _mine(path)
        check_ladder_doc(path, read_json_doc(path))
        assembled(path, "ladder")
        check_ladder_doc(path, read_json_doc(path))
        if _nothing_yet(path, read_json_doc(path)):
            return None
        with file_lock(path.with_suffix(".lock")), rendering(path):  # (as the ladder renders it: never an older
            _, table = ladder_report(path, Path(a.audit_dir) if a.audit_dir else None)  # JSON's over a newer one)
        return f"{path.name}\n{table}\n"

    def report_one(_: Path) -> str | None:
        verified_report(d)  # (checked first: a refusal writes nothing, not even the lock file)
        foreign = foreign_report_file(d)
        if foreign is not None:  # a user's own report.md or picture among the report's files: never written over
            raise UsageError(f"{foreign} exists and is not depthaudit's (report rewrites the audit's files there); "
                             "move it away and rerun")
        with file_lock(d / ".lock"), rendering(d / "report.json"), staged(d) as tmp:  # read again and written under
            # the lock the audit writes its report under: never an older report over one just written (walk 28 W4)
            report = verified_report(d)  # (figures, JSON and markdown: all of them or none)
            figures = audit_figures(report, tmp)
            md, text = audit_markdown(report, figures), audit_terminal(report)
            report["figures"] = figures
            write_json(tmp / "report.json", seal(report))
            write_text(tmp / "report.md", md)
        note = unrendered_note(report, d)  # a plug-in's quantities: said, not dropped silently
        if note:
            print(note, file=sys.stderr)
        return text

    from ..report.saturation import grow_figure, grow_md, grow_title, saturation_figure, saturation_md, saturation_title

    def saturation_one(path: Path) -> str | None:
        _mine(path)
        read_json_doc(path, runs=True)
        assembled(path, "saturation")
        doc = read_json_doc(path, runs=True)  # (checked first: a refusal writes nothing, not even the lock file)
        runs_intact(path, doc, "saturation")
        if _nothing_yet(path, doc):
            return None
        with file_lock(path.with_suffix(".lock")), rendering(path), staged(d) as tmp:
            doc = read_json_doc(path, runs=True)
            low = min((r["config"].get("low_signal", 5e-3) for r in doc["runs"].values()), default=5e-3)
            saturation_figure(doc, tmp / path.with_suffix(".png").name, low)
            table = saturation_md(doc)
            write_text(tmp / path.with_suffix(".md").name, f"# {saturation_title(doc)}\n\n{table}\n\n"
                       f"![saturation]({path.with_suffix('.png').name})\n")
        return f"{path.name}\n{table}\n"

    def intervention_one(_: Path) -> str | None:
        from ..report.intervene import intervention_doc, intervention_figure, intervention_md

        _mine(d / "intervention.json", [d / "intervention.md", d / "intervention.png"])
        verified_intervention(d)  # (a refusal first, writing nothing)
        with file_lock(d / ".lock"), rendering(d / "intervention.json"), staged(d) as tmp:  # (as report.json's)
            res = verified_intervention(d)
            intervention_figure(res, tmp / "intervention.png")
            table = intervention_md(res)
            write_text(tmp / "intervention.md", intervention_doc(res, table))
        return f"intervention.json\n{table}\n"

    def grow_one(path: Path) -> str | None:
        _mine(path)
        read_json_doc(path, runs=True)
        assembled(path, "grow")
        doc = read_json_doc(path, runs=True)  # (checked first: a refusal writes nothing, not even the lock file)
        runs_intact(path, doc, "grow")
        if _nothing_yet(path, doc):
            return None
        with file_lock(path.with_suffix(".lock")), rendering(path), staged(d) as tmp:
            doc = read_json_doc(path, runs=True)
            grow_figure(doc, tmp / path.with_suffix(".png").name)
            table = grow_md(doc)
            write_text(tmp / path.with_suffix(".md").name, f"# {grow_title(doc)}\n\n{table}\n\n"
                       f"![grow]({path.with_suffix('.png').name})\n")
        return f"{path.name}\n{table}\n"

    errors: list[BaseException] = []
    for render, paths in ((ladder_one, sorted(d.glob("ladder_*.json"))),
                          (report_one, [d / "report.json"] if (d / "report.json").exists() else []),
                          (saturation_one, sorted(d.glob("saturation_*.json"))),
                          (intervention_one, [d / "intervention.json"] if (d / "intervention.json").exists() else []),
                          (grow_one, sorted(d.glob("grow_*.json")))):
        for path in paths:
            if _users_own(path):  # a user's own JSON under a results file's name: left alone, the rest of the
                print(f"depthaudit: note: {path} is not depthaudit's (a JSON without its schema); it is left "  # folder
                      "alone", file=sys.stderr)  # still rendered (walk 40 W1: the folder's ladder was dropped unsaid)
                continue
            try:  # one file that cannot be rendered does not stop the others of the folder (each said once)
                text = render(path)
            except (UsageError, OSError) as exc:
                errors.append(exc)
                continue
            if text is not None:  # printed here, outside the try: standard output that cannot be written is the
                print(text)  # command's error, not this file's (walk 44 W1: `report DIR > /dev/full` called every
                found += 1  # file unrendered, though each was rewritten)
    if errors:
        raise Unrendered(errors, found)
    return found


def register(sub) -> None:
    """Add this module's subcommands to the CLI's subparsers (each with its own flags and ``func``)."""
    la = sub.add_parser("ladder", help=COMMANDS["ladder"][1],
                        description="For each method, k and seed train only the last k blocks; one resumable JSON "
                        "per configuration (ladder_d{d}_L{L}_{dataset}.json), a table and a figure.")
    add_train_args(la, per_run=False, sweep=LadderConfig, defaults={"dataset": "cifar10"})
    add_fields(la, LadderConfig, skip={"methods", "seeds"})
    g = la.group("ladder")
    g.add_argument("--gpu", type=NONNEG_INT, default=None, metavar="N",
                   help="use cuda:N (same as --device cuda:N)")
    shallow_args(g)
    out_arg(g, "results/depth_ladder", "folder for the ladder JSON, table and figure", shown="--output_dir",
            dest="output_dir")
    g.add_argument("--audit-dir", default=None, help="an audit --out folder to cross-check k=0 and k=L against")
    g.add_argument("--verbose", action="store_true", help="print every epoch of every run", advanced=True)
    sweep_args(la)
    la.set_defaults(func=cmd_ladder)

    rp = sub.add_parser("report", help=COMMANDS["report"][1], usage="%(prog)s [options] DIR",
                        description="Rebuild every table and figure (ladder_*, saturation_*, grow_*, report.json) "
                        "found in DIR and its subfolders, and assemble finished --cell runs (sweep.json).")
    rp.add_argument("dir", metavar="DIR", help="an audit --out or ladder --output_dir folder")
    rp.add_argument("--audit-dir", default=None, help="cross-check ladder k=0/k=L against this audit folder")
    rp.set_defaults(func=cmd_report)


def check_audit_dir(path: str | None) -> None:
    """``--audit-dir`` must be an audit's output folder (it holds ``report.json``); checked before any work."""
    if path is None:
        return
    p = Path(path)
    if not p.is_dir():
        hint = f"; give its folder, {p.parent}" if p.name == "report.json" else ""
        raise UsageError(f"--audit-dir {path}: {'not a folder' if p.exists() else 'no such folder'}{hint} "
                         "(the --out of a depthaudit audit)")
    if not (p / "report.json").is_file():
        raise UsageError(f"--audit-dir {path}: holds no report.json; give the --out folder of a depthaudit audit")


def runs_intact(path: Path, doc: dict, kind: str) -> None:
    """Every run record in a results file is intact (stores.record_problem): a damaged one is named, not rendered."""
    for key, rec in doc["runs"].items():
        bad = record_problem(rec)
        if bad:
            raise UsageError(f"{path}: run {key!r} {bad}; rerun the {kind} command that wrote it (the other runs "
                             "are reused)")


def check_ladder_doc(path: Path, doc: dict) -> None:
    """The fields the ladder report reads, each of the right type; every run record intact (stores.record_problem)."""
    ident, runs = doc.get("identity"), doc.get("runs")
    ok = isinstance(ident, dict) and all(k in ident for k in ("dataset", "arch", "d_hidden", "num_blocks", "epochs"))
    ok = ok and isinstance(runs, dict)
    moved = misplaced_runs(path.with_suffix(".runs")) if path.with_suffix(".runs").is_dir() else None
    if moved:  # records of another file (moved or swapped on disk): named as such, not this JSON as edited
        raise UsageError(moved)  # (walk 31 W7)
    marker = path.with_suffix(".runs") / "identity.json"  # the records' own claim: a JSON that disagrees with it is
    if ok and marker.is_file():  # the edited one, not its runs (walk 19 case 59: an intact run was blamed)
        own = read_json_doc(marker)
        truth = records_claim(path.with_suffix(".runs"))  # the sealed records outrank the claim: an edited claim
        edited_claim = truth is not None and bool(identity_diff(own.get("identity") or {}, truth["identity"]))
        diff = [] if edited_claim else identity_diff(own.get("identity") or {}, ident)  # is named where assembled
        if diff:
            raise UsageError(f"{path} differs from its records' claim {marker} (in: {', '.join(diff[:6])}): it was "
                             f"edited; move {path.name} away (report rebuilds it from the records)")

    for key, rec in (runs or {}).items() if ok else ():
        bad = record_problem(rec) or (placed_in_ladder(ident, key, rec.get("config") or {})
                                      if isinstance(rec.get("config"), dict) else None)
        if bad:
            raise UsageError(f"{path}: run {key!r} is malformed ({bad}); rerun the ladder command that wrote it "
                             "(that run trains again, the others are reused)")
        parts = key.split("/")
        final = rec.get("final") if isinstance(rec, dict) else None
        acc = final.get("test_acc") if isinstance(final, dict) else "bad"
        rung = len(parts) == 3 and (parts[1] == "shallow" or parts[1][1:].isdigit())
        if not rung or not isinstance(rec.get("status"), str) \
                or not (acc is None or isinstance(acc, int | float)):
            raise UsageError(f"{path}: run {key!r} is malformed (needs status and final.test_acc); "
                             "move the file away or rerun the ladder")
    if not ok:
        raise UsageError(f"{path}: not a ladder file (needs identity and runs); pass a folder the ladder wrote")


