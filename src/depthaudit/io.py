"""Atomic file writes: a reader never sees a half-written result."""

import contextlib
import errno
import hashlib
import io
import json
import math
import os
import shutil
import stat
import sys
import tempfile
import traceback
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from .errors import UsageError


def regular_file(path) -> Path:
    """``path``, refused in one line when it is a FIFO, device or socket (opening one would wait forever)."""
    p = Path(path)
    try:
        mode = os.stat(p).st_mode
    except OSError:
        return p  # (missing or unreadable: the open that follows names it)
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise UsageError(f"{p} is not a regular file (a FIFO, device or socket); give the data file itself")
    return p


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    """Content hash of one file (a FIFO or device is refused, never waited on)."""
    h = hashlib.sha256()
    with open(regular_file(path), "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


IN_FLIGHT: set[str] = set()  # temp files being written now (a worker's SIGTERM handler removes them)

# errors of the machine, not of depthaudit: a full disk, a read-only or unwritable place, a file where a
# folder must be. Each becomes one line naming the path and the fix (:func:`environment_error`).
_ENV_ERRNOS = {errno.ENOSPC: "free space on that disk, or write elsewhere",
               errno.EDQUOT: "free space within your quota, or write elsewhere",
               errno.EFBIG: "the file is larger than this process may write: raise `ulimit -f`, or write "
                            "elsewhere (a file system that takes files this large)",
               errno.EROFS: "that file system is read-only: choose a writable location",
               errno.EACCES: "give yourself access to it (read and write), or choose another location",
               errno.EPERM: "give yourself access to it (read and write), or choose another location",
               errno.ENOTDIR: "a file stands where a folder must be: move it, or choose another location",
               errno.EISDIR: "a folder stands where a file must be: move it, or choose another location",
               errno.ENAMETOOLONG: "use a shorter path",
               errno.EEXIST: "something that is not a folder stands where a folder must be: move it, or choose "
                             "another location",
               errno.ELOOP: "the path loops through symbolic links: choose another location",
               errno.EIO: "the disk reported an I/O error: check it, or write elsewhere",
               errno.EMFILE: "the process hit its open-file limit: raise it (`ulimit -n 1024`), or use fewer --jobs",
               errno.ENFILE: "the system hit its open-file limit: close other programs, or use fewer --jobs"}


def environment_error(exc: BaseException) -> str | None:
    """One line for an ``OSError`` the machine caused (disk full, unwritable, …), naming path and fix; else None."""
    if not isinstance(exc, OSError) or exc.errno not in _ENV_ERRNOS:
        return None
    # a rename (os.replace) that failed names its destination second: that is the path the user knows
    where = exc.filename2 if getattr(exc, "filename2", None) is not None else \
        exc.filename if exc.filename is not None else \
        "opening a file or pipe" if exc.errno in (errno.EMFILE, errno.ENFILE) else "a file (or the standard output)"
    return f"{where}: {exc.strerror or os.strerror(exc.errno)}; {_ENV_ERRNOS[exc.errno]}"


def not_a_file(path: Path) -> str | None:
    """What stands at ``path`` if it is not a regular file (nor absent, nor a link to one): a FIFO, a device…."""
    try:
        st = os.stat(path)  # through a link: a link to a FIFO is refused too (replacing the link would not be)
    except OSError:
        return None
    for test, what in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(st.st_mode):
            return what
    return None


def check_replaceable(path: Path, flag: str | None = None) -> None:
    """Refuse (one line) to replace what is not a regular file: a result never takes the place of a FIFO or device."""
    what = not_a_file(path)
    if what:
        name = f"{flag} {path}" if flag else str(path)
        raise UsageError(f"{name} is {what}, not a file depthaudit writes; it is left as it is: give a file path "
                         "(or a folder) that is free, or move it away")


def _atomic(path: Path, write) -> None:
    path = Path(path)
    check_replaceable(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        if exc.filename is None:
            exc.filename = str(path)
        raise
    IN_FLIGHT.add(tmp)
    try:
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; results should get the usual permissions
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename is None:
            exc.filename = str(path)  # a full disk names the file it could not write
        raise
    finally:
        IN_FLIGHT.discard(tmp)


def remove_in_flight() -> None:
    """Remove the temp files of writes in progress (an interrupted process's last act): nothing half-written."""
    for tmp in list(IN_FLIGHT):
        try:
            os.unlink(tmp)
        except OSError:
            pass


_HOST = "".join(c if c.isalnum() else "_" for c in __import__("socket").gethostname())[:40] or "host"


def _sweep_dead_scratch(folder: Path) -> None:
    """Remove scratch folders of :func:`staged` left by a process of this machine that is gone.

    A process killed outright (a script's default SIGTERM, SIGKILL) cannot clean up (walk 43 case 109: a stale
    ``.render-*`` outlived every later render). Each is named ``.render-HOST-PID-…``: only this host's, and only
    of a PID that no longer runs, are removed (another machine's on a shared file system is never touched).
    """
    for d in folder.glob(f".render-{_HOST}-*-*"):
        pid = d.name[len(f".render-{_HOST}-"):].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid() or not d.is_dir() or d.is_symlink():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except (PermissionError, OverflowError, OSError):  # alive (another user's) or not a PID: left alone
            continue


@contextmanager
def staged(folder: Path):
    """A scratch folder in ``folder`` whose files move into ``folder`` only if the block succeeds.

    Renames within one folder need no space, so a full disk or an error while writing several outputs (a
    report, its markdown, its figures) leaves none of them, or all of them.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    _sweep_dead_scratch(folder)
    with tempfile.TemporaryDirectory(dir=folder, prefix=f".render-{_HOST}-{os.getpid()}-") as tmp:
        yield Path(tmp)
        files = [f for f in sorted(Path(tmp).rglob("*")) if f.is_file()]
        for f in files:  # nothing replaced unless every file can be
            dest = folder / f.relative_to(tmp)
            check_replaceable(dest)
            if dest.is_dir():  # (os.replace would fail on it only after the files before it had moved)
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(dest))
        previous = Path(tmp) / ".previous"  # a copy of each file it replaces: a move that fails (an immutable file,
        previous.mkdir()  # a permission) puts the ones before it back, so the set stays whole (walk 11 cases 77, 78)
        kept, moved = {}, []
        for i, f in enumerate(files):
            dest = folder / f.relative_to(tmp)
            if dest.is_file():
                kept[dest] = previous / str(i)
                shutil.copy2(dest, kept[dest])
        try:
            for f in files:
                dest = folder / f.relative_to(tmp)
                dest.parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.replace(f, dest)
                except OSError as exc:
                    exc.filename = str(dest)  # (named as the file it could not replace, not our scratch copy)
                    raise
                moved.append(dest)
        except BaseException:
            for dest in reversed(moved):
                with contextlib.suppress(OSError):
                    os.replace(kept[dest], dest) if dest in kept else dest.unlink()
            raise


def finite_json(obj: Any) -> Any:
    """Replace non-finite floats (a diverged run's NaN/inf) by None so the file is strict JSON."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite_json(v) for v in obj]
    return obj


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as strict, indented JSON by write-to-temp then ``os.replace``."""
    data = (json.dumps(finite_json(obj), indent=2, allow_nan=False) + "\n").encode()
    _atomic(path, lambda fh: fh.write(data))


def save_torch(path: Path, obj: Any) -> None:
    """``torch.save`` with the same atomic replace.

    Serialised in memory first: ``torch.save`` into a file reports a failed write (a full disk) as a bare
    ``RuntimeError``, whereas writing its bytes here raises the ``OSError`` every other write does (one line).
    """
    import torch  # here, not at the top: `depthaudit --help` and the error handler must not import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    _atomic(path, lambda fh: fh.write(buf.getbuffer()))


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Atomic write of ``data`` (bytes kept as they were, e.g. a claim restored)."""
    _atomic(path, lambda fh: fh.write(data))


def write_text(path: Path, text: str) -> None:
    """Atomic text write."""
    _atomic(path, lambda fh: fh.write(text.encode()))


def save_figure(fig, path: Path) -> None:
    """Atomic PNG write of a matplotlib figure, marked as depthaudit's (its ``Software`` text: :func:`our_png`)."""
    _atomic(path, lambda fh: fig.savefig(fh, format="png", dpi=120, bbox_inches="tight",
                                         metadata={"Software": PNG_MARK}))


PNG_MARK = "depthaudit"  # the Software text of every figure depthaudit writes


def our_png(path: Path) -> bool:
    """Whether ``path`` is a PNG depthaudit wrote (its Software text chunk, before the image data, says so)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(1 << 16)
    except OSError:
        return False
    return head[:8] == b"\x89PNG\r\n\x1a\n" and b"Software\x00" + PNG_MARK.encode() in head


# the files an audit (and the monitor) write into their folder: never written over when they are a user's own
REPORT_FILES = ("report.json", "report.md", "cosine_heatmap.png", "scale_checks.png", "depth_utility.png",
                "per_sample_cosine.png")


def _our_json(path: Path) -> bool:
    if not Path(path).is_file():  # a FIFO is never opened (the read would block for ever), a folder is not ours
        return False
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return False
    return our_doc(doc)


def our_doc(doc) -> bool:
    """Whether a parsed JSON document is one depthaudit wrote (its schema; probes results before their schema)."""
    return isinstance(doc, dict) and (str(doc.get("schema", "")).startswith("depthaudit")
                                      or isinstance(doc.get("credit_mix"), dict))


def not_ours_why(path: Path) -> str:
    """Why ``path``, found not to be depthaudit's, is not: "is not depthaudit's", or that it cannot be read.

    A JSON that does not parse may be a damaged or truncated one of ours as well as a user's own (walk 21 W2).
    """
    p = Path(path)
    if p.suffix == ".json" and p.is_file():
        try:
            with open(p, encoding="utf-8") as fh:
                json.load(fh)
        except (OSError, ValueError):
            return "cannot be read as JSON (a damaged or truncated result, or a file of your own)"
    return "is not depthaudit's"


def foreign_json(path: Path) -> Path | None:
    """``path`` when it is a regular file that is not a depthaudit results JSON (a user's own), else None."""
    p = Path(path)
    return p if p.is_file() and not _our_json(p) else None


def foreign_report_file(out: Path, names=REPORT_FILES) -> Path | None:
    """The first of ``out/<names>`` that exists and is not depthaudit's own (a user's notes, picture, …), or None.

    Ours: a JSON with a ``depthaudit…`` schema, Markdown starting ``# depthaudit``, a PNG marked as ours
    (:func:`our_png`) — or any PNG beside our ``report.json`` (figures written before PNGs were marked).
    """
    out = Path(out)
    ours_json = _our_json(out / "report.json")
    for name in names:
        p = out / name
        if not (p.exists() or p.is_symlink()):
            continue
        if not p.is_file():  # a folder, FIFO or broken link there: the write itself names it (never replaced)
            continue
        if name.endswith(".json"):
            ok = _our_json(p)
        elif name.endswith(".md"):
            try:
                with open(p, "rb") as fh:
                    ok = fh.read(12) == b"# depthaudit"
            except OSError:
                ok = False
        else:
            try:
                with open(p, "rb") as fh:
                    ok = our_png(p) or (ours_json and fh.read(8) == b"\x89PNG\r\n\x1a\n")
            except OSError:
                ok = False
        if not ok:
            return p
    return None


OUR_TITLES = (b"# Depth", b"# Growth", b"# depthaudit", b"# Probes", b"# Scale-penalty")  # our Markdown's first bytes


def foreign_table_file(json_path: Path, others=None) -> Path | None:
    """The ``.md``/``.png`` beside a results JSON (or ``others``) that is not depthaudit's, or None.

    Ours: Markdown whose title is one of ours (:data:`OUR_TITLES`), a marked PNG, or a PNG beside our own JSON.
    ``others``: the paths to check instead of the JSON's ``.md``/``.png`` twins (an intervention's, a probes'
    figure of another name).
    """
    json_path = Path(json_path)
    ours_json = _our_json(json_path)
    for p in others if others is not None else (json_path.with_suffix(".md"), json_path.with_suffix(".png")):
        p = Path(p)
        if not (p.exists() or p.is_symlink()):
            continue
        if not p.is_file():  # a folder, FIFO or broken link there: the write itself names it (never replaced)
            continue
        try:
            with open(p, "rb") as fh:
                head = fh.read(16)
        except OSError:
            return p
        if p.suffix == ".png":  # (a PNG beside our JSON: a figure written before PNGs were marked)
            ok = our_png(p) or (ours_json and head[:8] == b"\x89PNG\r\n\x1a\n")
        else:
            ok = head.startswith(OUR_TITLES)
        if not ok:
            return p
    return None


def why_not_a_file(path) -> str:
    """Why ``path`` cannot be read as a file: ``no such file``, ``is a folder`` or ``is not a regular file …``."""
    p = Path(path)
    if p.is_dir():
        return "is a folder"
    if p.exists() or p.is_symlink():
        return "is not a regular file (a FIFO, device or socket, or a broken link)" if not p.is_file() else "is a file"
    return "no such file"


# set while a command only lists its cells (--list-cells): it writes nothing, so a read-only --out is fine then
LISTING_ONLY: ContextVar[bool] = ContextVar("depthaudit_listing_only", default=False)


def _sweep_records(runs: Path) -> bool:
    """Whether ``runs`` is a sweep's run store: a run record there without a folder claim of its own.

    (A ``train`` folder has one: ``runs/<config>``, train's default, holds trainings side by side.)
    """
    try:
        return any(not (r.parent / "identity.json").exists() for r in runs.glob("*/result.json"))
    except OSError:
        return False


def link_loops(path: Path) -> bool:
    """Whether ``path`` leads into a loop of symbolic links."""
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def check_output_dir(path, flag: str = "--out", subdirs: tuple[str, ...] = ()) -> None:
    """Refuse, before any work, an output folder that cannot be made or written (one line, the fix named).

    ``subdirs`` are folders the command will create inside it (e.g. the audit's ``runs``). The refusal names the
    folder as the caller gave it: ``flag`` on the command line, the keyword ``out`` from Python.
    """
    from .errors import ConfigError

    if not isinstance(path, str | os.PathLike):
        raise ConfigError(f"{{out}} must be a folder path (a str or Path), got {type(path).__name__} {path!r}",
                          {"out": flag})
    p = Path(path)
    def UsageError(text: str) -> ConfigError:  # noqa: N802 (the one error of this check, in the caller's terms)
        return ConfigError(text.replace(f"{flag} {p}", f"{{out={p}}}").replace(f"another {flag}", "another {out}"),
                           {"out": flag})

    for i, part in enumerate(p.parts):  # a ".." after a folder that does not exist: the system cannot resolve it
        if part == ".." and i and not Path(*p.parts[:i]).exists():  # without making that folder (walk 24 W5)
            raise UsageError(f"{flag} {p} passes through {Path(*p.parts[:i])}, which does not exist, before '..'; "
                             f"give the folder without the detour ({os.path.normpath(p)})")
    if p.is_symlink() and not p.exists():
        try:
            os.stat(p)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # (walk 20 W3: a loop was "a link to X, which does not exist; make it")
                raise UsageError(f"{flag} {p} is a loop of symbolic links ({p} → {os.readlink(p)} → …); remove one of "
                                 f"the links, or choose another {flag}") from None
        raise UsageError(f"{flag} {p} is a symbolic link to {os.readlink(p)}, which does not exist; make that folder, "
                         f"or choose another {flag}")
    dangling = next((q for q in (Path(*p.parts[:i + 1]) for i in range(len(p.parts) - 1))
                     if q.is_symlink() and not q.exists() and not link_loops(q)), None)
    if dangling is not None:  # a link to nowhere above it (walk 28 case 144: "DANG: File exists")
        raise UsageError(f"{flag} {p}: {dangling} is a symbolic link to {os.readlink(dangling)}, which does not "
                         f"exist; make that folder, or choose another {flag}")
    try:
        p.resolve()
    except (RuntimeError, OSError):  # a loop of links above it (walk 28 W3: LOOPA/x was pathlib's traceback)
        loop = next((q for q in (Path(*p.parts[:i + 1]) for i in range(len(p.parts))) if q.is_symlink() and
                     link_loops(q)), p)
        raise UsageError(f"{flag} {p}: {loop} is a loop of symbolic links ({loop} → {os.readlink(loop)} → …); "
                         f"remove one of the links, or choose another {flag}") from None
    if p.resolve().name == "warm_start" and p.is_dir() and any(p.resolve().parent.glob("probes_*.identity.json")):
        raise UsageError(f"{flag} {p}: it is the BP warm-start store of the probes in {p.resolve().parent} (their "
                         f"warm_start/ folder); choose another {flag}")  # (walk 26 W: an audit reused its runs there)
    if p.name == "runs" and p.is_dir() and (p.parent / "identity.json").is_file():
        raise UsageError(f"{flag} {p}: it is the run store of the results in {p.parent} (their runs/ folder); "
                         f"choose another {flag}")
    real = Path(os.path.realpath(p))  # (a link into a store is the store: checked as written and as resolved;
    lex = Path(os.path.normpath(p))  # written, with its ".." applied: A/runs/.. is A, not inside A/runs)
    for anc in dict.fromkeys((lex, *lex.parents, real, *real.parents)):  # inside another results file's record
        # folder (<name>.runs) or a sweep's runs/: never a store of its own
        if anc.name.endswith(".runs") and (anc / "identity.json").is_file():
            raise UsageError(f"{flag} {p}: it lies in {anc}, the run records of {anc.with_suffix('.json')}; "
                             f"choose another {flag}")
        if anc.name == "runs" and ((anc.parent / "identity.json").is_file() or _sweep_records(anc)):
            raise UsageError(f"{flag} {p}: it lies in {anc}, the run store of the results in {anc.parent}; "
                             f"choose another {flag}")
    for q in (p, *(p / s for s in subdirs)):
        if q.is_symlink() and not q.exists():  # (walk 29 W9: OUT/runs a link to nowhere was refused after the claim)
            raise UsageError(f"{flag} {p}: {q} is a symbolic link to {os.readlink(q)}, which does not exist; make "
                             f"that folder, or move the link away, or choose another {flag}")
        if q.exists() and not q.is_dir():
            raise UsageError(f"{flag} {p}: {q} exists and is not a folder; move it or choose another {flag}")
    anc = p
    while not anc.exists() and anc != anc.parent:
        anc = anc.parent
    if not anc.is_dir():
        raise UsageError(f"{flag} {p}: {anc} is a file, so the folder cannot be made; choose another {flag}")
    if LISTING_ONLY.get():  # (a listing writes nothing: where it could not write is no reason to refuse it)
        return
    if not os.access(anc, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {p}: {anc} is not writable; choose another {flag}")
    if anc != p:  # a folder that does not exist yet: make (and remove) its first level, as the command would
        first = p
        while first.parent != anc:
            first = first.parent
        try:
            os.mkdir(first)
            os.rmdir(first)
        except FileExistsError:
            pass  # another command made it a moment ago (two sweeps started at once): it can be made
        except OSError as exc:
            why = exc.strerror or str(exc)
            raise UsageError(f"{flag} {p}: cannot make {first} ({why}); choose another {flag}") from None


def silence_stdout() -> None:
    """Point the standard output at /dev/null: what is left in its buffer must not fail again at interpreter exit."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass  # not a real file (a test's capture)


# Exit status when whoever reads our output stops reading (`depthaudit … | head -1`): 141 = 128 + SIGPIPE, the
# status a shell reports for `yes | head -1` and for any Unix tool ended by the broken pipe, so `set -o pipefail`
# scripts see the same as with those tools; no traceback, no message (there is nobody to read it).
BROKEN_PIPE_EXIT = 141


def reader_gone() -> int:
    """The pipe we print into was closed: stop quietly (no traceback, not even at interpreter exit)."""
    remove_in_flight()
    for stream in (sys.stdout, sys.stderr):  # Python's final flush must not fail again on the dead pipe
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
        except (OSError, ValueError, AttributeError):
            pass  # not a real file (a test's capture): nothing is flushed to a pipe at exit
    return BROKEN_PIPE_EXIT


def script(fn, argv: list[str] | None = None) -> int:
    """Run a report script's ``fn(argv)`` (``python -m depthaudit.report.field``/``.claim``) as a command runs.

    A reader that stops reading ends it quietly (141), a standard output that cannot be written is one line
    (exit 2), never a traceback.
    """
    for name in ("stderr", "stdout"):  # started with the descriptor closed (`>&-`): as the CLI does (main)
        if getattr(sys, name) is None:
            setattr(sys, name, sys.stderr if name == "stdout" and sys.stderr is not None
                    else open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115 (lives as long as we do)
    try:
        rc = fn(argv)
        sys.stdout.flush()
        return rc
    except BrokenPipeError:
        return reader_gone()
    except OSError as exc:
        line = stdout_error(exc)
        if line is None:
            raise
        print(f"depthaudit: error: {line}", file=sys.stderr)
        return 2


def stdout_error(exc: BaseException) -> str | None:
    """One line when writing the standard output itself failed (a full disk, /dev/full); else None."""
    if isinstance(exc, ValueError) and getattr(sys.stdout, "closed", False):  # closed inside the process (a
        silence_stdout()  # plug-in's sys.stdout.close(): walk 14 case 56), then written to
        return "cannot write the standard output (it was closed during the command, e.g. by a plug-in)"
    if not isinstance(exc, OSError) or exc.filename is not None:
        return None  # every file depthaudit writes names itself (io._atomic): an unnamed write is stdout's or a log's

    last = (traceback.extract_tb(exc.__traceback__)[-1:] or [None])[0]
    printed = last is not None and (last.line or "").startswith("print(") and "file=" not in (last.line or "")
    try:
        sys.stdout.flush()
    except OSError:
        printed = True
    if not printed:
        return None
    silence_stdout()
    return f"cannot write the standard output ({exc.strerror or exc})"


def unlink_run_link(run_dir: Path) -> None:
    """Remove ``run_dir`` if it is a symbolic link (the link only: its target, another run's folder, is kept).

    A run's folder that is a link is not one written there: a run trained into it would replace the finished run
    of the folder it points to (walk 37 W2).
    """
    if Path(run_dir).is_symlink():
        Path(run_dir).unlink()
