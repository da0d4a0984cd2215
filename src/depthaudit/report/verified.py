"""A results file read for rendering: checked against its run records, its seal and its schema first.

What ``depthaudit report``, the field table and the claim figure read (a file edited by hand, or one its run
records do not give, is named in one line and never rendered). Below the commands and the API: the report
scripts use it too.
"""

import json
from contextlib import contextmanager
from importlib.resources import files
from pathlib import Path

from ..errors import UsageError
from ..experiments.audit import report_mismatch
from ..experiments.intervene import _row
from ..io import not_a_file
from ..stores import SEAL, FolderStore, check_folder_records, seal_problem, unsealed

USER_LOOP_RUNS = ("your training loop", "your training loop on frozen_twin")  # a monitor's runs: no record kept


@contextmanager
def rendering(path: Path):
    """A results file whose values cannot be rendered (damaged, hand-edited, another tool's) is one line naming it."""
    try:
        yield
    except UsageError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, ZeroDivisionError) as exc:
        what = f"{type(exc).__name__}: {str(exc).splitlines()[0][:80] if str(exc) else ''}"
        raise UsageError(f"{path}: its values cannot be rendered ({what}); it is damaged or not depthaudit's — rerun "
                         "the command that wrote it (if the file is intact, please report this)") from None



def verified_report(d: Path) -> dict:
    """``d/report.json`` (unsealed) once it is checked against its run records and its seal, else one line.

    What ``report``, the field table and the claim figure read: a report edited by hand, or one its run records
    do not give, is never rendered (the records are the truth; the audit rerun rewrites it from them).
    """
    sealed = read_json_doc(d / "report.json")
    report = unsealed(sealed)
    check_report_doc(d / "report.json", report)
    slugs = [slug for m in report.get("methods") or [] for kind in ("trained", "frozen")
             for slug in ((m.get("runs") or {}).get(kind) or [])]
    slugs += [slug for m in report.get("methods") or [] for slug in (m.get("shallow") or {}).get("runs") or []]
    # a missing or damaged run record behind the report: named, not rendered (a monitor's report of the
    # user's own training loop keeps no run records: nothing to check)
    check_folder_records(d / "runs", [s for s in slugs if s not in USER_LOOP_RUNS], d / "report.json")
    derived_from_records(d / "report.json", [report], d / "runs")
    edited = seal_problem(sealed)  # the rest, provenance included (the records above stand behind the numbers)
    if edited is None and SEAL not in sealed and FolderStore(d / "runs", log=lambda m: None).sealed():
        edited = (f"has no {SEAL} seal though the run records beside it are sealed (the seal was removed, so an "
                  "edit would not show)")
    if edited and slugs and all(s in USER_LOOP_RUNS for s in slugs):  # a monitor's report: no command, no records
        raise UsageError(f"{d / 'report.json'} {edited}; write it again from your training loop "
                         "(TrainingMonitor.report, then .write) into a new folder")
    if edited:
        raise UsageError(f"{d / 'report.json'} {edited}; rerun the audit command with --out {d} (finished runs "
                         "are reused) to write it again from the records")
    return report


def verified_intervention(d: Path) -> dict:
    """``d/intervention.json`` once its numbers are checked against its run records, else one line."""
    res = read_json_doc(d / "intervention.json")
    with rendering(d / "intervention.json"):
        audits = list((res.get("audits") or {}).values())
        slugs = [slug for a in audits for m in a["methods"] for kind in ("trained", "frozen")
                 for slug in m["runs"][kind]]
    check_folder_records(d / "runs", slugs, d / "intervention.json")
    derived_from_records(d / "intervention.json", audits, d / "runs", res)
    return res



def read_json_doc(path: Path, runs: bool = False) -> dict:
    """A results file as a dict; a damaged or foreign file is one line naming it (``runs``: needs a runs table)."""
    if not_a_file(Path(path)):
        raise UsageError(f"{path}: is {not_a_file(Path(path))}, not a results file; move it away")
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not valid JSON ({exc}); it is damaged — move it away, then rerun the command that "
                         "wrote it (which never writes over a file it cannot read)") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{path}: holds a {type(doc).__name__}, not a depthaudit results object; move it away")
    if runs and not (isinstance(doc.get("runs"), dict) and all(isinstance(r, dict) for r in doc["runs"].values())):
        raise UsageError(f"{path}: has no valid 'runs' table; it is not a file depthaudit wrote, or is damaged")
    return doc



def derived_from_records(path: Path, reports: list[dict], runs_root: Path, intervention: dict | None = None) -> None:
    """A derived file (``report.json``, ``intervention.json``) must say what its run records say: else one line."""
    with rendering(path):
        why = next((w for w in (report_mismatch(r, runs_root) for r in reports) if w), None)
        if why is None and intervention is not None:
            for row in intervention["rows"]:
                for cell in row["by_lambda"]:
                    audit = intervention["audits"][f"{float(cell['lambda']):g}"]
                    m = next(m for m in audit["methods"] if m["method"] == row["method"])
                    if {"lambda": cell["lambda"], **_row(m)} != cell:
                        why = f"its row for {row['method']} at λ={cell['lambda']:g} is not what its audit says"
            why = why or intervention_mismatch(intervention)
    if why:
        raise UsageError(f"{path}: {why}; it and its run records disagree (it was edited, or a record was replaced) "
                         "— rerun the command that wrote it into that folder (intact runs of its configuration are "
                         "reused, any other is named and trains again) to write it again from the records")


def intervention_mismatch(doc: dict) -> str | None:
    """Why an intervention.json's own fields (its λ grid, penalty form, rows) disagree with the audits it holds."""
    audits = doc["audits"]
    if [f"{float(x):g}" for x in doc["lambdas"]] != list(audits):
        return f"its λ grid {doc['lambdas']} is not that of the audits it holds ({', '.join(audits)})"
    for key, audit in audits.items():
        base = audit["config"]["base"]
        if f"{float(base.get('scale_penalty') or 0.0):g}" != key:
            return f"its audit at λ={key} ran with scale_penalty {base.get('scale_penalty')}"
        if not float(base.get("scale_penalty") or 0.0):  # λ = 0 has no form: its config stores abs/example
            continue  # (walk 17 cases 85, 86: a rel grid was refused as edited at its λ = 0 audit)
        for f, default in (("penalty_form", "abs"), ("penalty_reduction", "example")):
            if base.get(f, default) != doc.get(f, default):
                mine, theirs = doc.get(f, default), base.get(f, default)
                return f"its {f.replace('_', ' ')} {mine!r} is not its audits' ({theirs!r})"
    methods = [m["method"] for m in next(iter(audits.values()))["methods"]] if audits else []
    if [r["method"] for r in doc["rows"]] != methods or any(len(r["by_lambda"]) != len(audits) for r in doc["rows"]):
        return "its rows are not one per method and λ of its audits"
    return None



def check_report_doc(path: Path, doc: dict) -> None:
    """An audit report.json checked against the JSON Schema that ships with the package."""
    import jsonschema

    if not str(doc.get("schema", "")).startswith("depthaudit"):  # a user's own JSON of that name: no rerun writes
        raise UsageError(f"{path}: is not depthaudit's (a JSON without its schema), so there is no report to render "
                         "here; move it away to write an audit's report in this folder")
    schema_file = files("depthaudit.report").joinpath("audit.schema.json")
    schema = __import__("json").loads(schema_file.read_text(encoding="utf-8"))
    try:
        jsonschema.validate({**doc, "figures": doc.get("figures", {})}, schema)
    except jsonschema.ValidationError as exc:
        where = "/".join(map(str, exc.absolute_path)) or "top level"
        raise UsageError(f"{path}: not an audit report of this version ({where}: {exc.message[:120]}); rerun "
                         "`depthaudit audit` into that folder (finished runs are reused)") from None
