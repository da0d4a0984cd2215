"""Result stores: where a sweep's finished runs live, which configuration owns them, which records are intact.

A store has one identity (the configuration every run in it shares) and refuses another: a sweep *claims*
the identity under the store's file lock before it trains anything (:meth:`FileStore.claim`,
:func:`claim_folder`), so two sweeps with different configurations started into one folder at once cannot
mix: the second is refused in one line. Two sweeps with the same configuration cooperate: each run is
trained under its own lock (:meth:`FileStore.run_lock`), and a sweep that finds a run locked waits and then
reuses the record the other one stored. Every record is validated when read (:func:`record_problem`): a
truncated, hand-edited, non-numeric or non-finite record is named in one line and trained again (in a
sweep) or refused (in ``depthaudit report``), never reused or rendered as a number.
"""

# imports inside functions: fcntl is POSIX-only (guarded); runner loads torch, imported where a run is rebuilt
import contextlib
import glob
import hashlib
import json
import math
import os
import stat
import sys
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from .config import NAME_NEUTRAL, TrainConfig, nothing_trains
from .errors import UsageError
from .io import check_replaceable, finite_json, foreign_json, not_a_file, unlink_run_link, write_json

IDENTITY_FILE = "identity.json"  # in a FileStore's ``.runs`` folder, and in an audit's --out folder
STATUSES = ("ok", "diverged", "stopped_flagged")
# wherever these keys appear in a record their values are numbers (or None): a string there is damage
_NUMERIC = {"test_acc", "test_loss", "train_loss", "train_acc", "rho", "g_L", "mean_per_layer", "concat", "seconds",
            "epochs_completed", "AGmax", "params"}
_UNIT = {"test_acc", "train_acc"}  # accuracies lie in [0, 1]
_NONNEG = {"test_loss", "train_loss", "seconds", "g_L", "rho", "epochs_completed", "params"}


@dataclass(frozen=True)
class RunSpec:
    """One training run of a sweep: its config, its measurement plan and its key in the store."""

    key: str
    cfg: Any  # a TrainConfig, or any frozen config with to_dict() and same_as(stored_dict) (other runners)
    tracking: dict | None = None  # runner.tracking_plan(...): audit diagnostics on probe batches, monitor
    checkpoint: str | None = None  # also save weights + feedback here (e.g. a State Bridge's start)
    runner: Any = None  # runner(spec, data, log, argv) -> record; None = the training recipe


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def _finite_float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise ValueError(f"{text} overflows to a non-finite number")
    return v


def read_strict(path: Path) -> Any:
    """A JSON file, refusing what depthaudit never writes (``NaN``, ``Infinity``, overflowing numbers).

    Raises ``ValueError`` (``json.JSONDecodeError`` included) or ``OSError`` (unreadable). A FIFO or a device is
    never opened (a read would block, or never end): ``ValueError``.
    """
    what = not_a_file(Path(path))
    if what:
        raise ValueError(f"it is {what}, not a file")
    return json.loads(Path(path).read_text(encoding="utf-8"), parse_constant=_reject_constant,
                      parse_float=_finite_float)


SEAL = "record_sha256"  # a run record file's digest of its own content: a hand edit shows


def _digest(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, allow_nan=False).encode()).hexdigest()


def seal(rec: dict) -> dict:
    """The record as it is stored: strict JSON values plus :data:`SEAL`, the digest of everything else."""
    body = json.loads(json.dumps({k: v for k, v in finite_json(rec).items() if k != SEAL}, allow_nan=False))
    return {**body, SEAL: _digest(body)}


def seal_problem(doc: dict) -> str | None:
    """Why a sealed document (a run record, a report.json) was edited after it was written; None if intact/unsealed."""
    if not isinstance(doc, dict) or SEAL not in doc:
        return None
    try:
        ok = _digest({k: v for k, v in doc.items() if k != SEAL}) == doc[SEAL]
    except (TypeError, ValueError):
        ok = False
    return None if ok else f"was edited after it was written (its {SEAL} no longer matches its content)"


def records_claim(runs_dir: Path) -> dict | None:
    """``{"schema", "identity"}`` the sealed records in a ``.runs`` folder were written under (most of them).

    A record's place is sealed with it (:data:`STORED_IN`), so this outranks the folder's unsealed ``identity.json``
    and the derived JSON: None when the folder holds no such record. Most records, not the first: one record copied
    in from another store (walk 29 W7: over the alphabetically first, ``bp/k0/s1``) is that record's fault, named
    and retrained where it stands, never the claim's (which was then called edited). On a tie, the first.
    """
    votes: dict[str, list] = {}
    for p in sorted(Path(runs_dir).glob("*.json")) if Path(runs_dir).is_dir() else []:
        if p.name == IDENTITY_FILE:
            continue
        rec, _ = read_record(p)
        where = (rec or {}).get(STORED_IN)
        if rec is not None and SEAL in rec and seal_problem(rec) is None and isinstance(where, dict) \
                and isinstance(where.get("identity"), dict) and "schema" in where:
            claim = {"schema": where["schema"], "identity": where["identity"]}
            votes.setdefault(json.dumps(claim, sort_keys=True, default=str), [claim, 0])[1] += 1
    if not votes:
        return None
    return max(votes.values(), key=lambda cv: cv[1])[0]  # (max keeps the first of a tie: dicts keep their order)


def orphan_problem(doc: Any) -> str | None:
    """Why a results JSON found without its run records (``.runs`` moved away) cannot stand alone; None if it can.

    This version seals the JSON: an edit shows. An unsealed one is an earlier version's — unless its runs name the
    executor that trained them, which only versions with record folders (and, since, seals) write: then its seal
    was removed, and nothing would show an edit.
    """
    if not isinstance(doc, dict):
        return None
    if SEAL in doc:
        return seal_problem(doc)
    runs = doc.get("runs")
    if isinstance(runs, dict) and any(isinstance(r, dict) and isinstance(r.get("provenance"), dict)
                                      and "executor" in r["provenance"] for r in runs.values()):
        return (f"has no {SEAL} seal though it was written by a version that seals it (its runs name the executor "
                "that trained them; the seal was removed, so an edit would not show)")
    return None


def unsealed(rec: dict) -> dict:
    """The record without its seal and its place (what experiments and the assembled files hold)."""
    return {k: v for k, v in rec.items() if k not in (SEAL, STORED_IN)}


def record_problem(rec: Any) -> str | None:
    """Why a stored run record cannot be used, in a few words; ``None`` when it is intact.

    The schema every record of every runner shares: an object with a ``final`` object, a ``status``
    (one of :data:`STATUSES`), a ``config`` object, a ``history`` list of objects; every number finite,
    accuracies in [0, 1], losses and norms >= 0, and the measurement fields numbers (or null), never text.
    A run that finished ``ok`` has a final test accuracy.
    """
    if not isinstance(rec, dict):
        return f"is of type {type(rec).__name__}, not a run record"
    final = rec.get("final")
    if not isinstance(final, dict):
        return "has no 'final' object"
    status = rec.get("status", "ok")
    if status not in STATUSES:
        return f"status {status!r} is not one of {', '.join(STATUSES)}"
    for key, kind in (("config", dict), ("history", list)):
        if key in rec and not isinstance(rec[key], kind):
            return f"'{key}' is not a{'n object' if kind is dict else ' list'}"
    if not all(isinstance(h, dict) for h in rec.get("history") or []):
        return "'history' holds a non-object"
    if status == "ok" and final.get("test_acc") is None and "test_acc" in final:
        return "finished 'ok' without a final test_acc"
    bad = _walk(rec, "")
    if bad is None and SEAL in rec and rec[SEAL] != _digest({k: v for k, v in rec.items() if k != SEAL}):
        return f"was edited after it was written (its {SEAL} no longer matches its content)"
    return bad


def _walk(v: Any, where: str) -> str | None:
    if isinstance(v, float) and not math.isfinite(v):
        return f"{where or 'a value'} is {v}, not a finite number"
    if isinstance(v, dict):
        for k, x in v.items():
            path = f"{where}.{k}" if where else str(k)
            if k in _NUMERIC:
                bad = _number_problem(k, x, path)
                if bad:
                    return bad
            bad = _walk(x, path)
            if bad:
                return bad
    elif isinstance(v, list):
        for i, x in enumerate(v):
            bad = _walk(x, f"{where}[{i}]")
            if bad:
                return bad
    return None


def _number_problem(key: str, v: Any, where: str) -> str | None:
    vals = v if isinstance(v, list) else [v]
    for x in vals:
        if x is None:
            continue
        if isinstance(x, bool) or not isinstance(x, int | float):
            return f"{where} is {x!r}, not a number"
        if not math.isfinite(x):
            return f"{where} is {x}, not a finite number"
        if key in _UNIT and not 0 <= x <= 1:
            return f"{where} is {x}, outside [0, 1]"
        if key in _NONNEG and x < 0:
            return f"{where} is {x}, below 0"
    return None


def _not_own_file(path: Path) -> str | None:
    """Why ``path`` is not a file this store wrote: a symbolic link, a FIFO, a device…; None for a regular file."""
    try:
        st = os.lstat(path)
    except OSError:
        return None  # absent (or unreadable: the read says so)
    if stat.S_ISLNK(st.st_mode):
        return f"is a symbolic link (to {os.readlink(path)}), not a record written here"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file (a folder, FIFO, socket or device), not a record written here"
    return None


def read_record(path: Path) -> tuple[dict | None, str | None]:
    """``(record, None)`` if intact, ``(None, problem)`` if damaged, ``(None, None)`` if absent.

    Only a regular file is read: a symbolic link (say, to another run's record) or a FIFO is a problem, not a record.
    """
    bad = _not_own_file(Path(path))
    if bad:
        return None, bad
    try:
        rec = read_strict(path)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"cannot be read ({exc.strerror or exc})"
    except UnicodeDecodeError:
        return None, "is not text"
    except ValueError as exc:
        return None, f"is not valid JSON ({str(exc).splitlines()[0][:80]})"
    bad = record_problem(rec)
    return (None, bad) if bad else (rec, None)


STORED_IN = "stored_in"  # where a record was written: its key and its store's schema and identity (sealed with it)
# schema -> check(identity, key, config dict) -> problem or None: what a run stored under ``key`` in a store of that
# identity must have been trained with (the ladder registers its own: method, k and seed from the key)
EXPECTED: dict[str, Any] = {}
# schema -> name(identity): the results file a store of that identity is named by (the ladder registers its own);
# a .runs folder whose records name another file was moved or swapped on disk (walk 31 W7)
STORE_NAME: dict[str, Any] = {}


def misplaced_runs(runs_dir: Path) -> str | None:
    """One line when ``runs_dir``'s records (their sealed claim, else its ``identity.json``) belong to another file."""
    claim = records_claim(runs_dir)
    if claim is None:
        try:
            claim = json.loads((Path(runs_dir) / IDENTITY_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
    name_of = STORE_NAME.get((claim or {}).get("schema")) if isinstance(claim, dict) else None
    try:
        want = name_of(claim.get("identity") or {}) if name_of else None
    except (KeyError, TypeError, ValueError, UsageError):
        return None
    here = Path(runs_dir).with_suffix(".json").name
    if want is None or want == here:
        return None
    return (f"{runs_dir} holds the run records of {want}, not of {here} (its .runs folder was moved, renamed or "
            f"swapped on disk); move it back to {Path(want).with_suffix('.runs').name} (and {here}'s own records "
            f"to {Path(here).with_suffix('.runs').name}), then rerun")


def placement_problem(rec: dict, key: str, schema: str | None, identity: dict, defaults: dict | None = None,
                      sealed_store: bool = False) -> str | None:
    """Why an intact record cannot stand under ``key`` in a store of ``schema``/``identity``; None when it can.

    A record says where it was written (:data:`STORED_IN`, sealed with it); one moved, copied from a store of another
    configuration or swapped with another run's is caught by that, and by its own config, data hash and measurement
    plan (checked against the store's identity and, where the schema registers one in :data:`EXPECTED`, against what
    its key says). In a store whose records are sealed (``sealed_store``), a record without a seal is refused: its
    seal was removed, so nothing shows whether it was edited.
    """
    if sealed_store and SEAL not in rec:
        return (f"has no {SEAL} seal though this store's records are sealed (the seal was removed, so an edit "
                "would not show)")
    where = rec.get(STORED_IN)
    if where is not None:
        if not isinstance(where, dict):
            return f"'{STORED_IN}' is not an object"
        if where.get("key") != key:
            return f"was stored as run {where.get('key')!r}, not {key!r} (moved, copied or swapped on disk)"
        diff = identity_diff(where.get("identity") or {}, identity, defaults)
        if where.get("schema") != schema or diff:
            return (f"was stored in a results file of another configuration (differs in: "
                    f"{', '.join(diff[:6]) or 'schema'})")
    sha = identity.get("data_sha256")
    seen = ((rec.get("provenance") or {}).get("data") or {}).get("sha256")
    if sha is not None and seen is not None and seen != sha:
        return "was trained on other data than this store's (its data sha256 differs)"
    plan = rec.get("tracking")
    if isinstance(plan, dict):
        diff = [k for k in ("probe_batches", "probe_batch_size", "eps") if k in identity and k in plan
                and plan[k] != identity[k]]
        if diff:
            return f"was measured under another plan than this store's (differs in: {', '.join(diff)})"
    check = EXPECTED.get(schema)
    return check(identity, key, rec.get("config") or {}) if check is not None else None


def _special(path: Path) -> bool:
    """Whether ``path`` is a FIFO, device, socket or folder (what no write of ours replaces)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISLNK(mode))  # (a folder where the record must be: no write replaces it)


def _has_seal(path: Path) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return f'"{SEAL}"' in fh.read()
    except OSError:
        return False


class _Named:
    """Names each damaged record once (one line), whoever reads it."""

    def __init__(self, log=None):
        self.log, self.seen = log or _stderr, {}

    def __call__(self, path: Path, problem: str, then: str) -> None:
        if str(path) not in self.seen:
            self.seen[str(path)] = problem
            self.log(f"depthaudit: note: {path} {problem}; {then}")


def _lock_file(path: Path):
    """An open handle on ``path`` (created with its folder); a lock that is not a regular file is one line.

    Opened non-blocking: a FIFO or device put where the lock belongs would otherwise block the open forever.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK, 0o644)
    except OSError as exc:  # ENXIO: a FIFO with no reader
        if not path.is_symlink() and path.exists() and not path.is_file():
            raise UsageError(f"{path} is not a regular file (the command's lock file); remove it and rerun") from None
        raise exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UsageError(f"{path} is not a regular file (the command's lock file); remove it and rerun")
    return os.fdopen(fd, "a")


@contextmanager
def file_lock(path: Path, wait: bool = True):
    """An exclusive advisory lock on ``path`` (``flock``; released when its holder dies); yields whether it is held.

    ``wait=False`` does not block: it yields ``False`` when another process holds the lock. Where ``fcntl``
    is unavailable (not POSIX) no lock is taken (atomic replaces still keep every file valid).
    """
    fh = _lock_file(Path(path))
    try:
        try:
            import fcntl
        except ImportError:
            yield True
            return
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
    finally:
        fh.close()


@contextmanager
def folder_lock(folder: Path):
    """An exclusive ``flock`` on the folder itself (no lock file left beside a single-file result; POSIX only)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # (closing releases the lock)


RETRAINED = "it is not reused: that run is retrained (when the sweep trains)"  # (a listing trains nothing)
LEFT_OUT = "it is left out and not reused: that run is retrained (when the sweep trains)"
ORDERLESS = ("methods", "seeds")  # identity lists whose order names no other run


def identity_diff(old: dict, new: dict, defaults: dict | None = None, prefix: str = "") -> list[str]:
    """The keys (dotted for nested objects) where two identities differ; a missing key counts as its default.

    A sweep's ``methods`` and ``seeds`` are sets: the same ones in another order name the same runs.
    """
    defaults = defaults or {}
    out = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k, defaults.get(k)), new.get(k, defaults.get(k))
        if isinstance(a, dict) and isinstance(b, dict):
            out += identity_diff(a, b, None, f"{prefix}{k}.")
        elif not prefix and k in ORDERLESS and isinstance(a, list) and isinstance(b, list) \
                and sorted(map(json.dumps, a)) == sorted(map(json.dumps, b)):
            continue
        elif a != b:
            out.append(f"{prefix}{k}")
    return out


def _jsonable(obj: Any) -> Any:
    return json.loads(json.dumps(obj))


class FolderStore:
    """One folder per run, ``root/<slug>/result.json`` (the audit's layout); reuse needs an identical config.

    Runs of different configurations coexist here (each under its own hash); what a folder's *report*
    belongs to is claimed separately (:func:`claim_folder`).
    """

    def __init__(self, root: Path, data_sha256: str | None = None, log=None):
        self.root = Path(root)
        self.data_sha256 = data_sha256  # when given, a stored run is reused only if it saw the same data
        self.named = _Named(log)
        self._sealed: bool | None = None

    def sealed(self) -> bool:
        """Whether this store's records are sealed (any of them is): then one without a seal is refused."""
        if self._sealed is None:
            self._sealed = self.root.is_dir() and any(_has_seal(p) for p in self.root.glob("*/result.json")
                                                      if _not_own_file(p) is None)
        return self._sealed

    def path(self, spec: RunSpec) -> Path:
        """Where ``spec``'s result lives."""
        from .runner import run_slug

        return self.root / run_slug(spec.cfg, spec.tracking) / "result.json"

    def claim(self) -> None:
        """Nothing to claim: every run sits under its own configuration's hash."""

    def run_lock(self, spec: RunSpec, wait: bool = True):
        """The lock a process holds while it trains ``spec`` (so two sweeps never train one run twice)."""
        return file_lock(self.root / ".locks" / (self.path(spec).parent.name + ".lock"), wait)

    def get(self, spec: RunSpec, quiet: bool = False) -> dict | None:
        """The stored record if it is an intact, finished run of exactly this config and tracking.

        The slug's hash covers every config field, so a run stored by a version with fewer fields sits
        under another hash: siblings with the same readable prefix are checked too (``same_as`` reads a
        missing field as what that version ran with), so a newer version reuses what still matches.
        A damaged record is named (once) and not reused: the run is trained again.
        """
        path = self.path(spec)
        if path.parent.is_symlink():  # not a run folder written here: never read, nor written, through (walk 37 W2:
            if not quiet:  # a run trained "into" a link to another run's folder replaced that finished run)
                self.named(path.parent, f"is a symbolic link (to {os.readlink(path.parent)}), not a run folder "
                           "written here", RETRAINED + " (the link is replaced, its target left as it is)")
            return None
        prefix = path.parent.name.rsplit("_", 1)[0] + "_"
        siblings = sorted(self.root.glob(f"{glob.escape(prefix)}*/result.json")) if self.root.is_dir() else []
        for p in [path, *(s for s in siblings if s != path and s.parent.name.rsplit("_", 1)[0] + "_" == prefix)]:
            rec, bad = read_record(p)
            if bad and p == path and _special(p):  # never replaced (not a regular file of its own): refused now,
                raise UsageError(f"{p} {bad}; it is not replaced: move it away and rerun")  # not after training
            if bad:
                if p == path and not quiet:
                    self.named(p, bad, RETRAINED)
                continue
            if rec is None:
                continue
            bad = folder_placement(rec, p.parent.name, self.sealed())
            if bad:
                if p == path and not quiet:
                    self.named(p, bad, RETRAINED)
                continue
            seen = ((rec.get("provenance") or {}).get("data") or {}).get("sha256")
            if self.data_sha256 is not None and seen != self.data_sha256:
                continue
            if spec.cfg.same_as(rec.get("config") or {}) and rec.get("tracking") == spec.tracking:
                rec = unsealed(rec)
                return rec if p == path else {**rec, "stored_as": p.parent.name}
            own = SEAL in rec and (rec.get(STORED_IN) or {}).get("key") == p.parent.name
            if p == path and not quiet and not own:  # a record copied in (no seal or place of its own): retrained
                self.named(p, "holds a run of another configuration than its folder's name says", RETRAINED)
            elif p == path and not quiet:  # this run's own folder, sealed there, holds a finished run of another
                # configuration: one whose name does not cover what differs (a plug-in's option default changed
                # between runs, say). Retraining would write over a finished run: refused instead
                ours, theirs = spec.cfg.to_dict(), rec.get("config") or {}
                diff = sorted(k for k in {*ours, *theirs} - {"data_dir", "download"} if ours.get(k) != theirs.get(k))
                raise UsageError(f"{p} holds a finished run of another configuration under this run's name (it "
                                 f"differs in {', '.join(diff) or 'its tracking'}: did a plug-in's option default "
                                 "change?); it is not replaced: move its folder away, or choose another --out, and "
                                 "rerun")
        return None

    def put(self, spec: RunSpec, rec: dict) -> None:
        """Store a finished run (sealed, with its folder's name: a later hand edit or move is caught)."""
        path = self.path(spec)
        unlink_run_link(path.parent)
        write_json(path, seal({**rec, STORED_IN: {"key": path.parent.name}}))
        self._sealed = True

    def assemble(self) -> None:
        """Nothing to assemble: the records are the store."""

    def __str__(self) -> str:
        return str(self.root)


class FileStore:
    """All runs of one configuration in one JSON file, assembled from one record file per run.

    Each finished run is written atomically under its own name in ``<file>.runs/`` by whichever process ran
    it (a local worker, a Ray task, a SLURM array task), then the JSON is re-assembled from every intact
    record there under a file lock and replaced atomically: the JSON is derived, and can always be rebuilt
    from the ``.runs`` folder, whose ``identity.json`` says which configuration it holds. ``identity``
    describes what every run in the file shares (e.g. the base config and the data hash); a sweep claims it
    under the lock before training (:meth:`claim`), and a store holding a different identity is refused,
    never mixed.
    """

    def __init__(self, path: Path, schema: str, identity: dict, meta: dict | None = None,
                 defaults: dict | None = None, log=None):
        self.path, self.schema, self.identity = Path(path), schema, _jsonable(identity)
        self.runs_dir = self.path.with_suffix(".runs")
        self.defaults = defaults or {}
        self.meta = _jsonable(meta or {})
        self.named = _Named(log)
        self.damaged: dict[str, str] = {}  # record path -> problem, seen by the last read
        self._sealed: bool | None = None
        self.doc = {"schema": schema, "identity": self.identity, **self.meta, "runs": {}}
        doc, marker = self._read_owner()
        self._check(doc, marker)  # a store of another configuration: refused now, before any work
        doc = self._trusted(doc)
        runs = (doc or {}).get("runs")
        self.doc["runs"] = dict(runs) if isinstance(runs, dict) else {}  # (checked by get when used)

    # -- identity -------------------------------------------------------------------------------------------

    def _trusted(self, doc: dict | None) -> dict | None:
        """``doc`` as a source of runs: a sealed JSON edited after it was written, with no records beside it, is not.

        Where the records are (``.runs``), the JSON is derived and rebuilt from them; without them a JSON this version
        wrote (sealed) is the only copy, so an edit of it must not be reused nor turned into records (its runs are
        named and retrained). A JSON without a seal is an earlier version's (older than ``.runs`` folders).
        """
        bad = orphan_problem(doc) if doc is not None and not self.runs_dir.is_dir() else None
        if bad is None:
            return doc
        self.named(self.path, f"{bad}, and its records ({self.runs_dir.name}) are missing",
                   "its runs are not reused: each is retrained (when the sweep trains)")
        return {k: v for k, v in doc.items() if k not in ("runs", SEAL)}

    def _read_owner(self) -> tuple[dict | None, dict | None]:
        """``(doc, marker)`` as on disk (either None when absent); a damaged JSON is refused with advice that works."""
        doc = marker = None
        if self.path.exists():
            try:
                doc = read_strict(self.path)
            except (ValueError, UnicodeDecodeError) as exc:
                n = sum(p.name != IDENTITY_FILE for p in self.runs_dir.glob("*.json")) if self.runs_dir.is_dir() \
                    else 0  # (walk 15 case 187: the store's identity.json was counted as a run)
                raise UsageError(
                    f"{self.path} is not valid JSON ({str(exc).splitlines()[0][:60]}); it is rebuilt from the "
                    f"{n} run record(s) in {self.runs_dir}: move {self.path.name} away and rerun (finished runs "
                    f"are reused), or move {self.runs_dir.name} away too to start afresh") from None
            if not isinstance(doc, dict):
                raise UsageError(f"{self.path} holds a {type(doc).__name__}, not a depthaudit results file; "
                                 "move it away and rerun")
            if "schema" not in doc and "identity" not in doc and "runs" not in doc:  # a user's own JSON at this
                raise UsageError(f"{self.path} exists and is not depthaudit's (this sweep writes its results there); "
                                 "move it away or choose another output folder")  # name (walk 19 cases 183-186)
        mpath = self.runs_dir / IDENTITY_FILE
        if mpath.exists():
            try:
                marker = read_strict(mpath)
            except (ValueError, UnicodeDecodeError):
                marker = None  # rewritten from the JSON (or from this sweep's claim)
            if not isinstance(marker, dict) or not isinstance(marker.get("identity"), dict):
                marker = None
        return doc, marker

    def _check(self, doc: dict | None, marker: dict | None) -> None:
        moved = misplaced_runs(self.runs_dir) if self.runs_dir.is_dir() else None
        if moved:
            raise UsageError(moved)
        truth = records_claim(self.runs_dir)  # what the sealed records say they were written under: the last word
        if truth is not None and marker is not None:
            diff = identity_diff(marker.get("identity") or {}, truth["identity"], self.defaults)
            if marker.get("schema") != truth["schema"] or diff:
                raise UsageError(f"{self.runs_dir / IDENTITY_FILE} differs from the sealed run records beside it (in: "
                                 f"{', '.join(diff[:6]) or 'schema'}): it was edited; move it away (it is rewritten "
                                 "from the records) and rerun")
        marker = marker if marker is not None else truth  # (no marker: the records' own claim stands for it)
        mine = marker is not None and marker.get("schema") == self.schema and not identity_diff(
            marker.get("identity") or {}, self.identity, self.defaults)
        for what, owner in ((self.path, doc), (self.runs_dir, marker)):
            if owner is None:
                continue
            diff = identity_diff(owner.get("identity") or {}, self.identity, self.defaults)
            if (owner.get("schema") != self.schema or diff) and owner is doc and mine:  # the records are this
                raise UsageError(  # configuration's: only the derived JSON disagrees (edited by hand)
                    f"{self.path} differs from its records in {self.runs_dir.name} (in: "
                    f"{', '.join(diff[:6]) or 'schema'}): it was edited; move {self.path.name} away (it is rebuilt "
                    "from the records) and rerun")
            if owner.get("schema") != self.schema or diff:
                none = truth is None and not (self.runs_dir.is_dir() and any(
                    p.name != IDENTITY_FILE for p in self.runs_dir.glob("*.json")))
                held = ("is claimed by a sweep of a different configuration that has no finished run yet "
                        "(interrupted, or still running)" if none else "holds runs of a different configuration")
                raise UsageError(  # (walk 12 cases 96, 97: "holds runs" was said of a claim with none)
                    f"{what} {held} (differs in: {', '.join(diff[:6]) or 'schema'}); use another output folder, or "
                    f"{self.move_away()}" + (" if no such sweep runs" if none else ""))

    def move_away(self) -> str:
        """The advice to clear this store: its JSON and records, and a kept --cell command beside them."""
        also = ""  # (walk 32 case 224: the old --cell sweep's sweep.json outlived the files, and report reran it)
        if (self.path.parent / "sweep.json").is_file() and not foreign_json(self.path.parent / "sweep.json"):
            also = " (and sweep.json beside them, the --cell command that report would rerun)"
        return f"move {self.path.name} and {self.runs_dir.name} away{also}"

    def check(self) -> None:
        """Refuse (one line, as :meth:`claim` would) a store another configuration holds; nothing is written."""
        doc, marker = self._read_owner()
        self._check(doc, marker)

    def claim(self) -> None:
        """Take this store for this identity, under the lock, before anything trains.

        Refuses (one line) a store another configuration holds, even one that claimed it a moment ago;
        writes the identity marker in ``.runs`` and the JSON (assembled from the records already there). In a
        store older than seals, every intact record in its place is re-sealed (with its place) now, once.
        """
        from .io import foreign_table_file

        schema = str(self.schema or "")
        other_kind(self.path.parent, "probes" if schema == "depthaudit.credit_mix.v1" else  # (before any lock file
                   schema.split(".")[1] if "." in schema else "ladder",  # is made: walk 27 W4)
                   own=self.path.exists() or self.runs_dir.is_dir())
        for ext in (".json", ".md", ".png", ".lock"):  # a FIFO or device where the table goes: refused before a run
            check_replaceable(self.path.with_suffix(ext))  # trains (walk 28 case 240: after all of them had)
        if (self.runs_dir.exists() or self.runs_dir.is_symlink()) and not self.runs_dir.is_dir():  # (walk 29 W9:
            raise UsageError(f"{self.runs_dir} is not a folder (a file or a dangling link stands where "  # after the
                             f"{self.path.name}'s run records go); move it away, or choose another output "  # lock)
                             "folder")
        foreign = foreign_table_file(self.path)
        if foreign is not None:  # a user's own file under the table's name: never written over (refused before
            raise UsageError(f"{foreign} exists and is not depthaudit's (this command writes its table there); "
                             "move it away or choose another output folder")  # anything is made, the lock too)
        with file_lock(self.path.with_suffix(".lock")):
            doc, marker = self._read_owner()
            self._check(doc, marker)
            doc = self._trusted(doc)
            if not self.runs_dir.is_dir():  # a store older than record folders: its JSON's runs become records
                self._records_from(doc)
            if marker is None:
                write_json(self.runs_dir / IDENTITY_FILE, {"schema": self.schema, "identity": self.identity,
                                                           **self.meta})
            if not self.sealed():
                self._reseal()
            self._assemble_locked(doc)

    def _records_from(self, doc: dict | None) -> None:
        """Write each intact JSON run in its place as its record file (a store older than ``.runs`` folders), once.

        From then on the folder holds the records and the JSON is derived: an entry without its record file is
        neither rendered nor reused.
        """
        where = {"schema": self.schema, "identity": self.identity}
        for k, rec in ((doc or {}).get("runs") or {}).items() if isinstance((doc or {}).get("runs"), dict) else ():
            if not (record_problem(rec) or self.problem(k, rec, copy=True)):
                write_json(self._run_path(k), seal({**unsealed(rec), STORED_IN: {"key": k, **where}}))

    def _no_record(self, key: str) -> tuple[Path, str]:
        """How a JSON entry without its record file is named (the JSON is derived where a ``.runs`` folder is)."""
        return (Path(f"{self.path} (run {key})"),
                f"has no record file in {self.runs_dir} (deleted or moved away), so nothing shows it was measured")

    def _reseal(self) -> None:
        """Seal (with its place) every intact, unsealed record file that stands in its place (a pre-seal store)."""
        where = {"schema": self.schema, "identity": self.identity}
        for p in sorted(self.runs_dir.glob("*.json")) if self.runs_dir.is_dir() else []:
            rec, bad = read_record(p)
            key = unquote(p.stem)
            if p.name != IDENTITY_FILE and rec is not None and SEAL not in rec \
                    and not placement_problem(rec, key, self.schema, self.identity, self.defaults):
                write_json(p, seal({**rec, STORED_IN: {"key": key, **where}}))
                self._sealed = True

    # -- runs -------------------------------------------------------------------------------------------------

    def _run_path(self, key: str) -> Path:
        return self.runs_dir / (quote(key, safe="") + ".json")

    def run_lock(self, spec: RunSpec, wait: bool = True):
        """The lock a process holds while it trains ``spec`` (so two sweeps never train one run twice)."""
        return file_lock(self.runs_dir / (quote(spec.key, safe="") + ".lock"), wait)

    def _matches(self, spec: RunSpec, rec: dict | None) -> bool:
        return bool(rec) and spec.cfg.same_as(rec.get("config") or {}) and rec.get("tracking") == spec.tracking

    def sealed(self) -> bool:
        """Whether this store's records are sealed (any record file is): then one without a seal is refused."""
        if self._sealed is None:
            self._sealed = self.runs_dir.is_dir() and any(
                _has_seal(p) for p in self.runs_dir.glob("*.json")
                if p.name != IDENTITY_FILE and _not_own_file(p) is None)
        return self._sealed

    def problem(self, key: str, rec: dict, copy: bool = False) -> str | None:
        """Why an intact record (a record file's; ``copy``: the JSON's unsealed copy) cannot stand under ``key``."""
        return placement_problem(rec, key, self.schema, self.identity, self.defaults,
                                 sealed_store=not copy and self.sealed())

    def get(self, spec: RunSpec, quiet: bool = False) -> dict | None:
        """The stored record for ``spec.key`` if it is intact, in its place, and its config and tracking match.

        The run's own record file wins over the JSON's copy; a damaged or misplaced record is named (once, unless
        ``quiet``) and not reused.
        """
        p = self._run_path(spec.key)
        rec, bad = read_record(p)
        if bad and _special(p):  # never replaced (a FIFO, a folder): refused now, not after training (walk 25 W2)
            raise UsageError(f"{p} {bad}; it is not replaced: move it away and rerun")
        if rec is not None:
            bad = self.problem(spec.key, rec)
        if bad:
            if not quiet:
                self.named(p, bad, RETRAINED)
            return None
        if rec is None and self.runs_dir.is_dir():  # the JSON is derived from the records: its copy is no record
            if spec.key in self.doc["runs"] and not quiet:
                self.named(*self._no_record(spec.key), RETRAINED)
            return None
        if rec is None:
            rec = self.doc["runs"].get(spec.key)
            bad = rec is not None and (record_problem(rec) or self.problem(spec.key, rec, copy=True))
            if bad:
                if not quiet:
                    self.named(Path(f"{self.path} (run {spec.key})"), bad, RETRAINED)
                return None
        return unsealed(rec) if self._matches(spec, rec) else None

    def other_device(self, spec: RunSpec) -> str | None:
        """The device of a stored run under ``spec.key`` that is ``spec`` but for its device, else None.

        Such a run is not reused (a CPU and a GPU draw different data orders from one seed); the sweep says
        so before it trains the cell again here, and ``--list-cells`` shows it.
        """
        rec, _ = read_record(self._run_path(spec.key))
        rec = rec or (None if self.runs_dir.is_dir() else self.doc["runs"].get(spec.key))
        cfg = (rec or {}).get("config") or {}
        dev = cfg.get("device")
        if not dev or not hasattr(spec.cfg, "device") or dev == spec.cfg.device:
            return None
        with nothing_trains():  # the stored device is compared, never run on here
            same = replace(spec.cfg, device=dev).same_as(cfg) and rec.get("tracking") == spec.tracking
        return dev if same else None

    def differs(self, spec: RunSpec) -> list[str]:
        """The config keys in which a stored run under ``spec.key`` differs from ``spec``.

        E.g. a local model's or text's content digest after the files changed; [] when none is stored or it
        predates every such key.
        """
        rec, _ = read_record(self._run_path(spec.key))
        rec = rec or (None if self.runs_dir.is_dir() else self.doc["runs"].get(spec.key))
        if rec is not None and self.problem(spec.key, rec):  # a damaged or misplaced record is named and retrained
            return []  # (a swapped rung's record differs in train_blocks: not another configuration of this store)
        cfg = (rec or {}).get("config") or {}
        return [k for k, v in spec.cfg.to_dict().items() if k in cfg and k != "device" and cfg[k] != _jsonable(v)]

    def put(self, spec: RunSpec, rec: dict) -> None:
        """Write the run's own record file, then re-assemble the JSON from every record (under a lock).

        The record is sealed with its key and this store's identity (:data:`STORED_IN`).
        """
        where = {"key": spec.key, "schema": self.schema, "identity": self.identity}
        write_json(self._run_path(spec.key), seal({**rec, STORED_IN: where}))
        self._sealed = True
        self.assemble()

    def assemble(self) -> None:
        """Rewrite the JSON from what is on disk: its intact runs plus every intact record file (which win)."""
        with file_lock(self.path.with_suffix(".lock")):
            self.assemble_locked()

    def assemble_locked(self) -> None:
        """:meth:`assemble` where the caller holds the store's lock (to render what it assembled under it)."""
        try:
            doc, _ = self._read_owner()
        except UsageError:
            doc = None  # a damaged JSON is derived data: rebuilt from the records
        self._assemble_locked(self._trusted(doc))

    def _assemble_locked(self, doc: dict | None) -> None:
        self.damaged = {}
        runs = {}
        files = self.read_runs()
        derived = self.runs_dir.is_dir()  # the JSON is derived: an entry is kept only through its record file
        for k, rec in ((doc or {}).get("runs") or {}).items():
            bad = record_problem(rec) or self.problem(k, rec, copy=True)
            if bad:  # a copy only the JSON held (an earlier version's file): named, left out, trained again
                self.damaged[f"{self.path} (run {k})"] = bad
                self.named(Path(f"{self.path} (run {k})"), bad, LEFT_OUT)
            elif derived and k not in files and str(self._run_path(k)) not in self.damaged:
                where, bad = self._no_record(k)
                self.damaged[str(where)] = bad
                self.named(where, bad, LEFT_OUT)
            elif not derived:
                runs[k] = unsealed(rec)
        for k, v in (doc or {}).items():  # what another version or command added at the top level stays
            if k not in ("schema", "identity", "runs", SEAL):
                self.doc.setdefault(k, v)
        runs.update(files)
        self.doc["runs"] = runs
        write_json(self.path, seal(self.doc))  # sealed: without its records, an edit of this copy still shows

    def read_runs(self) -> dict[str, dict]:
        """``{key: record}`` of every intact record file; damaged ones are kept in :attr:`damaged`."""
        if not self.runs_dir.is_dir():
            return {}
        out = {}
        for p in sorted(self.runs_dir.glob("*.json")):
            if p.name == IDENTITY_FILE:
                continue
            rec, bad = read_record(p)
            if rec is not None:
                bad = self.problem(unquote(p.stem), rec)
            if bad:  # left out of the JSON; a sweep names it when it comes to that run (get), report refuses it
                self.damaged[str(p)] = bad
            elif rec is not None:
                out[unquote(p.stem)] = unsealed(rec)
        return out

    def strays(self, keys) -> list[tuple[Path, str]]:
        """Damaged record files in the ``.runs`` folder that no run of ``keys`` (a command's grid) will replace."""
        keys = set(keys)
        out = []
        for p in sorted(self.runs_dir.glob("*.json")) if self.runs_dir.is_dir() else []:
            if p.name == IDENTITY_FILE or unquote(p.stem) in keys:
                continue
            rec, bad = read_record(p)
            bad = bad or (self.problem(unquote(p.stem), rec) if rec is not None else None)
            if bad:
                out.append((p, bad))
        return out

    def __str__(self) -> str:
        return str(self.path)


def rebuild_file_store(runs_dir: Path, log=None) -> FileStore | None:
    """The store whose ``.runs`` folder this is, its JSON rebuilt from the records; None without an identity marker."""
    runs_dir = Path(runs_dir)
    try:
        marker = read_strict(runs_dir / IDENTITY_FILE)
    except (OSError, ValueError, UnicodeDecodeError):
        marker = records_claim(runs_dir)  # (moved away: the sealed records' own claim names the store)
    if not isinstance(marker, dict) or not isinstance(marker.get("identity"), dict) or "schema" not in marker:
        return None
    meta = {k: v for k, v in marker.items() if k not in ("schema", "identity")}
    store = FileStore(runs_dir.with_suffix(".json"), marker["schema"], marker["identity"], meta, log=log)
    store.assemble()
    return store


def read_run_files(folder: Path, keys: list[str] | None = None) -> dict[str, dict]:
    """``{key: record}`` of the intact record files in ``folder`` (all, or those of ``keys``); damaged ones skipped."""
    folder = Path(folder)
    if not folder.is_dir():
        return {}
    paths = sorted(p for p in folder.glob("*.json") if p.name != IDENTITY_FILE) if keys is None \
        else [folder / (quote(k, safe="") + ".json") for k in keys]
    out = {}
    for p in paths:
        rec, _ = read_record(p)
        if rec is not None:
            out[unquote(p.stem)] = rec
    return out


def folder_placement(rec: dict, slug: str, sealed_store: bool) -> str | None:
    """Why an intact record cannot stand in the run folder ``slug`` of a :class:`FolderStore`; None when it can.

    Its readable name (dataset, shape, method, blocks, epochs, seed) must be the one its config gives, and where
    it says where it was written (:data:`STORED_IN`), that folder; a seal removed in a sealed store is refused.
    """
    bad = placement_problem(rec, slug, None, {}, sealed_store=sealed_store) if SEAL not in rec else None
    where = rec.get(STORED_IN)
    if bad is None and isinstance(where, dict) and where.get("key") != slug:
        bad = f"was stored in run folder {where.get('key')!r}, not {slug!r} (moved, copied or swapped on disk)"
    if bad is None:
        from .data.base import DATASETS
        from .methods import METHODS
        from .models import MODELS
        from .runner import run_slug

        cfg = rec.get("config") if isinstance(rec.get("config"), dict) else {}
        for key, reg in (("method", METHODS), ("arch", MODELS), ("dataset", DATASETS)):  # a plug-in's name, its
            name = cfg.get(key)  # --plugin not given (walk 15 cases 134, 135; walk 16 case 11: an --arch)
            if isinstance(name, str) and name and name not in reg.names():
                raise UsageError(f"its run {slug} names {key} {name!r}, which no module loaded here registers; give "
                                 "the plug-in that registers it before the command (depthaudit --plugin MODULE …)")
        try:
            own = run_slug(TrainConfig.from_dict(rec.get("config") or {}), rec.get("tracking"))
        except (TypeError, ValueError, UsageError) as exc:
            name = cfg.get("method")
            mod = getattr(METHODS._items.get(name), "__module__", "") if isinstance(name, str) else ""
            if mod and not mod.startswith("depthaudit."):  # a plug-in's method whose options changed since it
                raise UsageError(  # trained this run (walk 29 W12: "this version cannot read; rerun", which failed)
                    f"its run {slug} was trained by method {name!r} with options {cfg.get('method_options') or {}}, "
                    f"which the loaded plug-in {mod} ({_plugin_file(mod)}) no longer takes "
                    f"({str(exc).removeprefix('method_options: ').split(';')[0]}): its code "
                    "changed since; load the version that trained it, or write to a new --out") from None
            return "holds a config this version cannot read"
        if own.rsplit("_", 1)[0] != slug.rsplit("_", 1)[0]:
            bad = f"holds the run {own.rsplit('_', 1)[0]!r}, not the one its folder names (moved or swapped on disk)"
    return bad


def _plugin_file(mod: str) -> str:
    return getattr(sys.modules.get(mod), "__file__", None) or mod


def check_folder_records(root: Path, slugs: list[str], named_by: Path | None = None) -> None:
    """Every ``root/<slug>/result.json`` named is present, intact and in its place; else one line naming it.

    A derived file (``named_by``: a report.json, an intervention.json) whose run records are missing (deleted, or
    the file copied from another folder) cannot be checked against them, so it is refused, never rendered.
    """
    if Path(root).exists() and not Path(root).is_dir():
        raise UsageError(f"{root} is not a folder (a file stands where the run records must be); move it away, then "
                         f"rerun the command that wrote {Path(root).parent} (its runs train again)")
    sealed = FolderStore(root, log=lambda m: None).sealed()
    for slug in slugs:
        p = Path(root) / slug / "result.json"
        rec, bad = read_record(p)
        if bad and _special(p):  # no rerun replaces it: the fix is to move it
            raise UsageError(f"{p} {bad}; move it away, then rerun the command that wrote this folder (it trains "
                             "that run again and rewrites the report)")
        if rec is None and bad is None:
            raise UsageError(f"{named_by or root}: its run {slug} has no record ({p} is missing); rerun the "
                             f"command that wrote it into {Path(root).parent} (finished runs are reused) to train "
                             "that run again and rewrite it from the records")
        if rec is not None:
            try:
                bad = folder_placement(rec, slug, sealed)
            except UsageError as exc:  # (a plug-in's name): the folder named first
                raise UsageError(f"{Path(root).parent}: {exc}") from None
        if bad:
            raise UsageError(f"{p} {bad}; rerun the command that wrote this folder: it trains that run again and "
                             "rewrites the report")


# -- a folder's report: one owner --------------------------------------------------------------------------


def claim_folder(folder: Path, kind: str, identity: dict, take_over: bool = False, flag: str = "--out",
                 name: str = IDENTITY_FILE,
                 take_over_flag: str | None = "--replace-report (replace_report=True)", dry: bool = False) -> dict:
    """Claim ``folder`` (its report) for ``identity``, under the folder's lock, before anything trains.

    The first command to claim a folder owns it (``folder/identity.json``); another with a different
    identity is refused in one line, naming ``take_over_flag`` where the command has one (``take_over``
    replaces the owner instead). Returns the claim, to
    pass to :func:`still_owner` before the report is written. ``name`` is the claim's file: a folder that holds
    several reports side by side (``probes``: one per method) claims each under its own name. ``dry``: every
    refusal, nothing written, no lock taken (``--list-cells``: a grid the folder would refuse is refused, not listed).
    """
    folder = Path(folder)
    claim = {"schema": "depthaudit.identity.v1", "kind": kind, "identity": _jsonable(identity)}
    if name != IDENTITY_FILE:
        claim["file"] = name
    for f in (name, ".lock"):  # a FIFO or device there: refused before the lock file is made (walk 28 W8)
        check_replaceable(folder / f)
    if foreign_claim(folder / name):  # a user's own file of that name: never taken for a claim, never replaced
        raise UsageError(f"{folder / name} exists and is not depthaudit's (the folder's claim is written there); "
                         f"move it away or use another {flag}")
    with file_lock(folder / ".lock") if not dry else contextlib.nullcontext():
        old = _read_claim(folder, name)
        other_kind(folder, kind, flag)  # another command's folder: never taken over, not even by --force or
        # --replace-report (and a folder of its own kind: the claim below decides)
        if old is not None and not take_over:
            was, now = _without_neutral(old.get("identity") or {}), _without_neutral(claim["identity"])
            diff = identity_diff(was, now)
            if diff and grows(was, now, diff, kind):
                pass  # the same audit with more methods or seeds: it keeps every stored run, its report covers all
            elif diff:
                kept = ("its result is replaced" if (folder / "result.json").exists() else
                        "it holds no result: that training never finished") if kind == "train" else \
                    "the runs of both are kept"
                if kind != "train" and any(d.endswith("sha256") for d in diff):  # a run's folder names its config,
                    # not its data: the same runs retrain in place (walk 35 W2: "kept", then overwritten)
                    kept = ("its runs are retrained on this data in place: those of the other data are replaced; "
                            "to keep them, use another " + flag)
                over = f", or {take_over_flag} to take it over ({kept})" if take_over_flag else ""
                if name == IDENTITY_FILE and _report_agrees(folder, diff, now) and grows(now, was, diff, kind):
                    # the claim holds more than its report: an audit that grew it has not finished (walk 26 case 38:
                    # an interrupted or failed growth was called an edit)
                    hint = add_hint(diff, was, now).replace("; to add to it, name", "; to finish it, name")
                    raise UsageError(f"{folder} is claimed by an audit with more {', '.join(diff)} that has not "
                                     f"finished (its report.json is still this configuration's){hint} (its stored "
                                     f"runs are reused); or {take_over_flag} to take it back to this configuration "
                                     "(the runs of both are kept)")
                if name == IDENTITY_FILE and _report_agrees(folder, diff, now):  # the claim alone was edited
                    raise UsageError(f"{folder / name} differs from the sealed report.json beside it, which is this "
                                     f"configuration's (in: {', '.join(diff[:6])}): it was edited; move it away (it "
                                     "is rewritten) and rerun")  # (walk 20 W7: "belongs to another audit")
                grow = add_hint(diff, was, now) if set(diff) <= set(GROWABLE.get(kind, ())) else ""
                raise UsageError(f"{folder} belongs to another {old.get('kind', 'sweep')} (differs in "
                                 f"{', '.join(diff[:6])}){grow}; use another {flag}{over}")
        if old != claim and not dry:
            if take_over and old is not None and name == IDENTITY_FILE:  # the taken-over command's --cell record
                _forget_cells(folder)  # is stale: `report` would assemble that command, not this one (walk 25 W3)
            write_json(folder / name, claim)
    return claim


FOLDER_KINDS = ("audit", "intervene", "train", "probes")  # a folder holds one of these commands' results, alone
# (``identity.json``, or ``probes_<method>.identity.json``); the file-layout sweeps (ladder, saturation, grow) share
# a folder with each other, each store under its own configuration's file name


def folder_holds(folder: Path) -> list[tuple[str, str]]:
    """``(kind, file)`` for each command whose results ``folder`` holds: its claims and its file-layout stores."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    held = []
    claim = _read_claim(folder)
    if claim is not None and "kind" in claim and not foreign_claim(folder / IDENTITY_FILE):  # (a user's own
        held.append((str(claim["kind"]), IDENTITY_FILE))  # identity.json is named by the claim, as it always was)
    held += [("probes", p.name) for p in sorted(folder.glob("probes_*.identity.json"))[:1]]
    for p in sorted(folder.glob("*.runs/identity.json")):
        try:
            schema = str((json.loads(p.read_text(encoding="utf-8")) or {}).get("schema", ""))
        except (OSError, ValueError, AttributeError):
            continue
        kind = "probes" if schema == "depthaudit.credit_mix.v1" else schema.split(".")[1] if "." in schema else ""
        if kind and kind not in {k for k, _ in held}:
            held.append((kind, p.parent.with_suffix(".json").name))
    return held


def other_kind(folder: Path, kind: str, flag: str = "--out", own: bool = False) -> None:
    """Refuse ``folder`` if it holds another command's results that ``kind`` may not sit beside, whatever is asked.

    A command of :data:`FOLDER_KINDS` writes only into a folder of its own kind (or a new one); a file-layout
    sweep (ladder, saturation, grow) shares its folder with other file-layout sweeps, never with those (walk 27
    cases 159, 167, 168: a train moved into a ladder folder and took its claim; an audit wrote into a probes
    folder). Checked before a sweep lists, trains or assembles its cells, and again under the lock as it claims.
    """
    ok = {kind} if kind in FOLDER_KINDS else {"ladder", "saturation", "grow"}
    holds = folder_holds(folder)
    if own or any(k == kind for k, _ in holds):  # this command's results are there
        return  # already (a folder mixed before this rule): they stay its own to rerun and report
    for other, file in holds:
        if other not in ok:
            where = "" if file == IDENTITY_FILE else f": {file}"
            if file == IDENTITY_FILE and not _any_result(folder):  # (walk 33 case 188: a claim, no result yet)
                where = f": its claim, {IDENTITY_FILE}, and no result yet — an interrupted or running {other}"
            raise UsageError(f"{folder} holds the results of another command ({other}{where}); "
                             f"{kind} cannot write there: use another {flag}")


def _any_result(folder: Path) -> bool:
    """Whether ``folder`` holds a result of the command that claimed it: a report, a run's record, a sweep's JSON."""
    return any(any(folder.glob(pattern)) for pattern in ("report.json", "result.json", "runs/*/result.json",
                                                          "warm_start/runs/*/result.json", "*.runs/*.json"))


def _forget_cells(folder: Path) -> None:
    """Remove ``folder/sweep.json`` (a --cell command kept for ``report``) if it is depthaudit's."""
    p = Path(folder) / "sweep.json"
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(doc, dict) and doc.get("schema") == "depthaudit.sweep.v1":
        p.unlink(missing_ok=True)


def _report_agrees(folder: Path, diff: list[str], now: dict) -> bool:
    """Whether ``folder``'s sealed, intact ``report.json`` holds ``now``'s value at every differing key (dotted)."""
    try:
        doc = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(doc, dict) or SEAL not in doc or seal_problem(doc) is not None:
        return False
    missing = object()
    for key in diff:
        have, want = doc.get("config"), now
        for part in key.split("."):
            have = have.get(part, missing) if isinstance(have, dict) else missing
            want = want.get(part, missing) if isinstance(want, dict) else missing
        if have is missing or want is missing or _jsonable(have) != _jsonable(want):
            return False
    return True


def add_hint(diff: list[str], was: dict, now: dict) -> str:
    """``; to add to it, name everything it holds too (methods bp fa fa:head=exact)``: the lists that cover both.

    What the folder holds comes first, what was asked after; a held row that an option of an asked row of its
    method would rewrite (``fa`` beside ``fa:head=exact``, which ``--fa-head exact`` makes of a bare ``fa``) is
    written with that option at its default (``fa:head=feedback``), so naming the list as given keeps it (walk 20
    W2: the hint named exactly what the user had named, and the refusal repeated).
    """
    parts = []
    for k in diff:
        held, asked = [str(x) for x in was.get(k) or []], [str(x) for x in now.get(k) or []]
        if k == "methods":
            stale = _untakeable(held)
            if stale:  # a plug-in changed since those rows trained: no list covers both (walk 29 W12)
                return (f"; it holds methods the loaded plug-ins no longer take as they were trained ({stale}), so "
                        "no command adds to it")
            held = [_explicit(h, asked) for h in held]
        if k == "alphas":  # (a grid is sorted: written as the flag takes it, 0 0.5, not 0.0 0.5)
            held, asked = [f"{float(x):g}" for x in was.get(k) or []], [f"{float(x):g}" for x in now.get(k) or []]
        parts.append(f"{k} {' '.join(dict.fromkeys([*held, *asked]))}")
    return "; to add to it, name everything it holds too (" + "; ".join(parts) + ")"


def _untakeable(specs: list[str]) -> str | None:
    """``"spec: why"`` for the first of ``specs`` whose method is registered here but refuses it; else None."""
    from .config import TrainConfig
    from .methods import METHODS, parse_method_spec
    from .methods.specs import parse_spec

    for spec in specs:
        if spec.partition(":")[0].strip() not in METHODS:
            continue  # (a plug-in not loaded here, or no spec at all: named elsewhere)
        try:
            parse_spec(spec)
            parse_method_spec(spec, TrainConfig())
        except UsageError as exc:
            why = str(exc).removeprefix("method_options: ").removeprefix(f"method spec {spec!r}: ")
            return f"{spec}: {why.split(';')[0]}"
    return None


def _explicit(label: str, asked: list[str]) -> str:
    """``label`` with each option that an asked row of its method sets written out at its default."""
    from .methods import METHODS
    from .methods.options import declared
    from .methods.specs import parse_spec

    try:
        ms = parse_spec(label)
        opts = declared(METHODS.get(ms.name))
        keys = [k for a in asked if parse_spec(a).name == ms.name for k, _ in parse_spec(a).given]
    except Exception:  # noqa: BLE001 (a plug-in's method not registered here: the label as stored)
        return label
    given = dict(ms.given)
    extra = [k for k in dict.fromkeys(keys) if k not in given]
    if not extra:
        return label
    fmt = lambda v: ("yes" if v else "no") if isinstance(v, bool) else f"{v:g}" if isinstance(v, float) else str(v)  # noqa: E731
    return f"{label}{',' if ':' in label else ':'}" + ",".join(f"{k}={fmt(opts[k].default)}" for k in extra)


# commands whose folder takes more of these lists later (each run is stored under its own hash): an audit more
# methods or seeds, a method's probes more α or seeds (its grid is sorted, so order names nothing either)
GROWABLE = {"audit": ORDERLESS, "probes": ("alphas", "seeds")}


def grows(was: dict, now: dict, diff: list[str], kind: str = "audit") -> bool:
    """Whether ``now`` is ``was`` with more of ``kind``'s growable lists (every value it held kept), nothing else."""
    if not set(diff) <= set(GROWABLE.get(kind, ())):
        return False
    return all(set(map(json.dumps, was.get(k) or [])) <= set(map(json.dumps, now.get(k) or [])) for k in diff)


def _without_neutral(identity: dict) -> dict:
    """An identity without the fields added later at the value earlier runs had (``base`` and the top level).

    :data:`~depthaudit.config.NAME_NEUTRAL`: a folder claimed before those fields existed stays its own.
    """
    def strip(d):
        return {k: v for k, v in d.items() if not (k in NAME_NEUTRAL and v == NAME_NEUTRAL[k])}

    out = strip(identity)
    if isinstance(out.get("base"), dict):
        out["base"] = strip(out["base"])
        if "seeds" in out:  # a sweep's base seed is the first of its seeds: the same seeds in another order are the
            out["base"].pop("seed", None)  # same sweep (walk 15 cases 288-292: refused as "differs in base.seed")
    return out


def foreign_claim(path: Path) -> bool:
    """Whether ``path`` (where a claim goes) is a file depthaudit did not write.

    That is JSON without our schema, or an unreadable file in a folder that holds nothing of ours (a damaged
    claim beside our runs is rewritten by the claimant).
    """
    if not path.is_file():
        return False
    try:
        doc = read_strict(path)
    except (OSError, ValueError, UnicodeDecodeError):
        folder = path.parent
        return not ((folder / "runs").exists() or (folder / "report.json").exists() or any(folder.glob("*.runs"))
                    or (folder / "result.json").exists())
    return not (isinstance(doc, dict) and str(doc.get("schema", "")).startswith("depthaudit"))


def _read_claim(folder: Path, name: str = IDENTITY_FILE) -> dict | None:
    try:
        old = read_strict(Path(folder) / name)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, UnicodeDecodeError):
        return None  # damaged: the claimant rewrites it
    return old if isinstance(old, dict) else None


@contextmanager
def still_owner(folder: Path, claim: dict, flag: str = "--out"):
    """Hold the folder's lock while the report is written, refusing if another command took the folder over."""
    folder = Path(folder)
    with file_lock(folder / ".lock"):
        now = _read_claim(folder, (claim or {}).get("file", IDENTITY_FILE))
        if claim is not None and now is not None and now != claim:
            was, grown = _without_neutral(claim.get("identity") or {}), _without_neutral(now.get("identity") or {})
            diff = identity_diff(was, grown)
            if diff and grows(was, grown, diff, now.get("kind")):
                raise UsageError(f"{folder} was extended by another {now.get('kind')} (more {', '.join(diff)}) while "
                                 f"this one ran; every run of this one is stored in {folder / 'runs'}, and the other "
                                 "writes the report of all (or rerun with its full lists to write it now)")
            raise UsageError(f"{folder} was taken over by another {now.get('kind', 'sweep')} (--replace-report, "
                             f"replace_report=True) while this one ran; its runs are stored in {folder / 'runs'}: "
                             f"rerun with another {flag} to get its report")
        yield
