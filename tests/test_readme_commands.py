"""Every command the README and the documentation pages show still parses: documented commands cannot rot.

The pages are ``README.md`` and every ``docs/*.md``. Each ``depthaudit …`` command in them is parsed by the real
CLI parser — unknown flags, bad values and removed commands fail here — without training: fenced lines
(continuations joined, ``$`` prompts and comments dropped), commands quoted inside a fenced line (``sbatch --wrap
'depthaudit …'``) and inline code spans (``depthaudit report DIR``), with placeholders such as ``DIR`` filled in.
Each ``python benchmarks/….py …`` or ``python examples/….py …`` line's flags must appear in that script's
``--help``. Every relative link and image in those pages must point to a file that exists, and a link's
``#anchor`` to a heading of the page it names.
"""

import argparse
import os
import re
import shlex
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from depthaudit.commands import build_parser
from depthaudit.plugins import import_plugins_in

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PLACEHOLDERS = {"DIR": "data", "DEV": "cpu", "PT": "checkpoint.pt", "PATH": "checkpoint.pt", "FILE": "text.txt",
                "OUT": "results/x", "FOLDER": "results/x", "COMMAND": "audit", "$SLURM_ARRAY_TASK_ID": "0"}
FENCE = re.compile(r"^\s*(```|~~~)")


def _is_synopsis(cmd: str) -> bool:
    """``[optional]`` synopses and elided commands (``...``, ``…``) are not commands."""
    return "..." in cmd or "…" in cmd or "[" in cmd


def _fenced(path: Path, prefix: str) -> list[tuple[str, str]]:
    """``(where, line)`` for the fenced command lines of ``path`` that start with ``prefix`` or quote it."""
    out, inside, pending, start = [], False, "", 0
    for no, raw in enumerate(path.read_text().splitlines(), 1):
        if FENCE.match(raw):
            inside, pending = not inside, ""
            continue
        if not inside:
            continue
        start = start if pending else no
        ln = pending + raw.strip()
        if ln.endswith("\\"):  # a continued command
            pending = ln[:-1] + " "
            continue
        pending = ""
        ln = ln[2:] if ln.startswith("$ ") else ln
        where = f"{path.relative_to(ROOT)}:{start}"
        if ln.startswith(prefix):
            out.append((where, ln))
        elif f"'{prefix}" in ln or f'"{prefix}' in ln:  # e.g. sbatch --wrap 'depthaudit … --cell $ID'
            try:
                toks = shlex.split(ln.split("  #", 1)[0], comments=True)
            except ValueError:
                continue
            out.extend((where, t) for t in toks if t.startswith(prefix))
    return [(w, c) for w, c in out if not _is_synopsis(c)]


def _synopses() -> list[tuple[str, str]]:
    """``(where, line)`` for fenced ``depthaudit COMMAND [--flag …]`` synopses: their flags are checked by name."""
    out = []
    for page in PAGES:
        inside, current = False, None
        for no, raw in enumerate([*page.read_text().splitlines(), ""], 1):
            if current and inside and raw.startswith(" ") and not FENCE.match(raw):  # an indented continuation
                current[1] += " " + raw.strip()
                continue
            if current:
                out.append(tuple(current))
                current = None
            if FENCE.match(raw):
                inside = not inside
            elif inside and raw.startswith("depthaudit ") and "[" in raw:
                current = [f"{page.relative_to(ROOT)}:{no}", raw.strip()]
    return out


def _prose(path: Path) -> str:
    """The page with its fenced blocks blanked (line numbers kept)."""
    lines, inside = [], False
    for raw in path.read_text().splitlines():
        if FENCE.match(raw):
            inside = not inside
            lines.append("")
            continue
        lines.append("" if inside else raw)
    return "\n".join(lines)


def _inline(path: Path, prefix: str) -> list[tuple[str, str]]:
    """``(where, span)`` for the inline code spans of ``path`` that are ``prefix …`` commands."""
    text, out = _prose(path), []
    for m in re.finditer(r"`([^`\n]+(?:\n[^`\n]+)*)`", text):
        span = " ".join(m.group(1).split())
        if span.startswith(prefix) and not _is_synopsis(span):
            out.append((f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1} inline", span))
    return out


def _commands(prefix: str) -> list[tuple[str, str]]:
    return [c for page in PAGES for c in (*_fenced(page, prefix), *_inline(page, prefix))]


def _argv(line: str) -> list[str]:
    line = line.split("  #", 1)[0]
    toks = shlex.split(line, comments=True)
    return [PLACEHOLDERS.get(t, t) for t in toks]


DEPTHAUDIT = _commands("depthaudit ")
SCRIPTS = _commands("python benchmarks/") + _commands("python examples/")


def _params(cmds):
    return [pytest.param(where, line, id=f"{where} {line[:60]}") for where, line in cmds]


def _command_names() -> set[str]:
    p = build_parser([])
    return {name for a in p._actions if isinstance(a, argparse._SubParsersAction) for name in a.choices}


def test_the_pages_document_commands():
    assert len(DEPTHAUDIT) >= 40 and len([c for c in SCRIPTS if "benchmarks/" in c[1]]) >= 3
    readme = [c for w, c in DEPTHAUDIT if w.startswith("README.md")]
    assert any(c.startswith("depthaudit audit") for c in readme)
    assert any(c.startswith("depthaudit saturation") for c in readme)
    for page in PAGES:  # every page that shows a depthaudit command in a fence has it checked here
        fenced = [ln for ln in page.read_text().splitlines() if ln.strip().startswith("depthaudit ")]
        assert not fenced or any(w.startswith(f"{page.relative_to(ROOT)}:") for w, _ in DEPTHAUDIT), page


@pytest.mark.parametrize(("where", "line"), _params(DEPTHAUDIT))
def test_documented_depthaudit_command_parses(where, line, monkeypatch):
    argv = _argv(line)[1:]
    monkeypatch.chdir(ROOT)  # --plugin examples.… imports from the repository root
    monkeypatch.syspath_prepend(str(ROOT))
    monkeypatch.setenv("DEPTHAUDIT_PLUGINS", os.environ.get("DEPTHAUDIT_PLUGINS", ""))  # restored afterwards
    import_plugins_in(argv)
    try:
        args = build_parser(argv).parse_args(argv)
    except SystemExit as exc:
        if exc.code == 0 and ("--help" in argv or "--help-all" in argv):
            return
        if len(argv) == 1 and where.endswith(" inline"):  # prose naming a command (`depthaudit report`)
            assert argv[0] in _command_names(), f"{where}: no command {argv[0]!r}"
            return
        pytest.fail(f"{where}: documented command does not parse (exit {exc.code}): {line}")
    assert callable(args.func)


@pytest.mark.parametrize(("where", "line"), _params(SCRIPTS))
def test_documented_script_flags_exist(where, line):
    argv = _argv(line)
    script = ROOT / argv[1]
    assert script.exists(), f"{where}: {line}"
    p = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=300,
                       cwd=ROOT)
    if p.returncode != 0 and "ModuleNotFoundError" in p.stderr:  # an optional extra (e.g. transformers)
        pytest.skip(p.stderr.strip().splitlines()[-1])
    assert p.returncode == 0, p.stderr[-1000:]
    for tok in argv[2:]:
        if tok.startswith("--"):
            assert tok.split("=")[0] in p.stdout, f"{tok} is not a flag of {argv[1]}"


@pytest.mark.parametrize(("where", "line"), _params(_synopses()))
def test_documented_synopsis_flags_exist(where, line):
    sub = line.split()[1]
    p = build_parser([sub])
    sp = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)).choices[sub]
    for flag in re.findall(r"(?<![\w-])--[a-z][\w-]*", line):
        assert flag in sp._option_string_actions, f"{where}: {flag} is not a flag of depthaudit {sub}"


def _slug(heading: str) -> str:
    """The anchor Python-Markdown's ``toc`` (and so mkdocs and GitHub, for these headings) gives a heading."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.replace("`", "").replace("*", ""))
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors(page: Path) -> set[str]:
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", _prose(page), re.M)}


LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _links():
    out = []
    for page in PAGES:
        text = _prose(page)
        text = re.sub(r"`[^`\n]*`", "", text)
        for m in LINK.finditer(text):
            target = m.group(1)
            if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
                continue
            out.append(pytest.param(page, target, id=f"{page.relative_to(ROOT)} {target}"))
    return out


@pytest.mark.parametrize(("page", "target"), _links())
def test_documented_links_resolve(page, target):
    path, _, anchor = target.partition("#")
    dest = (page.parent / path).resolve() if path else page
    assert dest.exists(), f"{page.relative_to(ROOT)} links to {target}, which does not exist"
    if anchor and dest.suffix == ".md" and (dest.parent == ROOT / "docs" or dest == page):
        assert anchor in _anchors(dest), f"{page.relative_to(ROOT)}: no heading #{anchor} in {dest.name}"
