"""The import graph of ``depthaudit`` has no circles and no arrow running back up (docs/extending.md, "Layout").

Every module under ``src/depthaudit`` is read with :mod:`ast` (nothing is imported). Every ``import`` and
``from … import`` statement counts wherever it stands: at module level, inside a function or method, under
``if TYPE_CHECKING:``. A function-level import is still a dependency (it only runs later), so hiding one inside a
function does not hide it from this test. Relative imports are resolved against the importing module's package,
and ``from P import x`` means the module ``P.x`` when ``P/x.py`` (or ``P/x/``) exists, else the module ``P``.

Packages. A package is its ``__init__.py``: its re-exports (``from .base import METHODS``) are arrows from the
package to those submodules. Importing ``P.m`` from outside ``P`` runs ``P/__init__.py`` first, so it is also an
arrow to ``P`` (and to every package between); a module never gets that implicit arrow to a package that contains
it (its package is already being imported when it runs), so ``methods/bp.py``'s ``from .base import …`` is not a
circle with ``methods/__init__.py`` re-exporting ``BP`` — but an explicit ``from . import METHODS`` in a submodule
that the package imports would be one, and is reported.

The top package ``depthaudit/__init__.py`` is the public facade: it imports nothing of the package at import time
(checked below) and resolves its public names lazily (PEP 562, its ``_LAZY`` table). It sits in the bottom layer,
so ``from depthaudit import __version__`` is allowed anywhere; ``from depthaudit import audit`` (a lazy name)
inside the package is read as an import of the module that defines it (``depthaudit.api``).

Not counted: imports by computed name (``importlib.import_module``: the commands table imports the module of
the command it runs, ``--plugin`` imports the user's modules), which a reader cannot follow either.

Layers. :data:`LAYERS` lists the layers from the bottom; a module may import its own layer and those below (the
circles test keeps imports inside one layer acyclic), never a layer above. Every module must be declared in one.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

import depthaudit

PKG = "depthaudit"
SRC = Path(depthaudit.__file__).parent

# bottom → top; names relative to the package ("" is depthaudit/__init__.py); a package name covers its modules
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("", "errors", "registry", "seeds", "fields", "io", "progress", "plugins", "provenance")),
    ("models, data, depth measures", ("models", "data", "depth")),
    ("methods", ("recipe", "methods")),
    ("diagnostics", ("verdicts", "diagnostics")),
    ("run config", ("config", "optim")),
    ("training", ("loop", "batched")),
    ("runs and sweeps", ("runner", "stores", "executors", "sweep", "runlog")),
    ("experiments", ("experiments",)),
    ("report", ("report",)),
    ("Python API", ("api", "evaluator")),
    ("commands", ("commands",)),
    ("CLI", ("cli", "__main__")),
]


def module_files(src: Path = SRC, pkg: str = PKG) -> dict[str, Path]:
    """``{dotted module name: file}`` for every ``.py`` file under ``src`` (a package is its ``__init__``)."""
    out = {}
    for path in sorted(src.rglob("*.py")):
        parts = [pkg, *path.relative_to(src).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _packages_above(name: str) -> list[str]:
    """The packages that contain ``name`` (``a.b.c`` → ``a``, ``a.b``)."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def import_graph(src: Path = SRC, pkg: str = PKG) -> tuple[dict[str, set[str]], dict[tuple[str, str], list[int]]]:
    """``(edges, lines)``: module → the package's modules it imports, and where (line numbers) each arrow is."""
    mods = module_files(src, pkg)
    lazy = _lazy_names(mods[pkg])
    edges: dict[str, set[str]] = {m: set() for m in mods}
    lines: dict[tuple[str, str], list[int]] = defaultdict(list)

    def nearest(name: str, m: str, lineno: int) -> str:
        found = name
        while found not in mods and "." in found:
            found = found.rsplit(".", 1)[0]
        assert found in mods, f"{mods[m]}:{lineno}: imports {name}, which is not a module of {pkg}"
        return found

    for m, path in mods.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.split(".")[0] == pkg]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = m.split(".") if is_pkg else m.split(".")[:-1]
                    base = base[:len(base) - (node.level - 1)]
                    frm = ".".join(base + ([node.module] if node.module else []))
                else:
                    frm = node.module or ""
                if frm.split(".")[0] != pkg:
                    continue
                for a in node.names:
                    if f"{frm}.{a.name}" in mods:
                        targets.append(f"{frm}.{a.name}")
                    elif frm == pkg and a.name in lazy:
                        targets.append(f"{pkg}.{lazy[a.name]}")
                    else:
                        targets.append(frm)
            for name in targets:
                t = nearest(name, m, node.lineno)
                # importing t runs the packages above it first, except those m is itself part of
                for dep in [*_packages_above(t), t]:
                    implicit = dep != t
                    if dep == m or (implicit and dep in _packages_above(m)):
                        continue
                    edges[m].add(dep)
                    lines[m, dep].append(node.lineno)
    return edges, lines


def _lazy_names(root_init: Path) -> dict[str, str]:
    """The top package's PEP 562 table ``{public name: module}``, read from its source."""
    for node in ast.parse(root_init.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_LAZY" for t in node.targets):
            return ast.literal_eval(node.value)
    return {}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def layer_of(module: str, pkg: str = PKG) -> int | None:
    """The index in :data:`LAYERS` of ``module`` (the most specific declared name that covers it), or None."""
    rel = "" if module == pkg else module.removeprefix(pkg + ".")
    best = None
    for i, (_, names) in enumerate(LAYERS):
        for n in names:
            if rel == n or (n and rel.startswith(n + ".")):
                if best is None or len(n) > best[1]:
                    best = (i, len(n))
    return None if best is None else best[0]


def _where(m: str, t: str, lines, mods) -> str:
    return f"{m} -> {t}  ({', '.join(f'{mods[m].relative_to(SRC.parent)}:{n}' for n in sorted(set(lines[m, t])))})"


# --- the graph -------------------------------------------------------------------------------------------------


def test_no_import_circles():
    edges, lines = import_graph()
    mods = module_files()
    found = circles(edges)
    for comp in found:
        inside = set(comp)
        print(f"import circle of {len(comp)} modules: {', '.join(comp)}")
        for m in comp:
            for t in sorted(edges[m] & inside):
                print("   ", _where(m, t, lines, mods))
    assert not found, f"{len(found)} import circle(s): " + "; ".join(" ↔ ".join(c) for c in found)


def test_every_module_is_in_a_layer():
    missing = [m for m in module_files() if layer_of(m) is None]
    assert not missing, f"declare the layer of {missing} in LAYERS (tests/test_imports.py) and docs/extending.md"


def test_no_import_runs_back_up():
    edges, lines = import_graph()
    mods = module_files()
    up = [(m, t) for m in sorted(edges) for t in sorted(edges[m])
          if None not in (layer_of(m), layer_of(t)) and layer_of(t) > layer_of(m)]
    for m, t in up:
        print(f"{LAYERS[layer_of(m)][0]} imports {LAYERS[layer_of(t)][0]}:", _where(m, t, lines, mods))
    assert not up, f"{len(up)} import(s) run back up: " + "; ".join(f"{m} -> {t}" for m, t in up)


def test_the_top_package_imports_nothing_of_its_own_at_import_time():
    edges, _ = import_graph()
    assert edges[PKG] == set(), f"depthaudit/__init__.py imports {sorted(edges[PKG])}: keep it lazy (PEP 562)"


def test_the_documented_layout_is_the_enforced_one():
    doc = (Path(__file__).parents[1] / "docs" / "extending.md").read_text(encoding="utf-8")
    table = doc[doc.index("**Layout**"):].split("\n\n")[1].splitlines()[2:]
    rows = [[c.strip() for c in r.strip("|").split("|")] for r in table]
    assert [r[0] for r in reversed(rows)] == [name for name, _ in LAYERS]
    for (name, modules), row in zip(LAYERS, reversed(rows), strict=True):
        for m in modules:
            shown = "`__init__.py`" if not m else f"`{m}.py`" if (SRC / f"{m}.py").exists() else f"`{m}/"
            assert shown in row[1], f"docs/extending.md's {name!r} row does not name {shown}"


# --- the walker itself: each kind of import is seen (else the tests above pass on an empty graph) -------------


def test_the_walker_sees_every_kind_of_import():
    edges, lines = import_graph()
    assert "depthaudit.commands" in edges["depthaudit.cli"]  # module level, relative
    assert "depthaudit.data.cifar" in edges["depthaudit.data"]  # `from . import cifar`: the submodule
    assert "depthaudit.seeds" in edges["depthaudit.methods"]  # function level (build_method)
    assert "depthaudit.api" in edges["depthaudit.commands.depth"]  # `from .. import api` inside a function
    assert "depthaudit.methods" in edges["depthaudit.diagnostics.base"]  # `from ..methods.base`: its package runs
    assert "depthaudit.methods" not in edges["depthaudit.methods.bp"]  # …but not a package the module is part of
    assert "depthaudit.methods.base" in edges["depthaudit.methods"]  # a package's re-exports
    assert "depthaudit" in edges["depthaudit.provenance"]  # `from . import __version__`
    assert sum(map(len, edges.values())) > 300


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    src = tmp_path / PKG
    for name, text in {"__init__.py": "", **files}.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(text)
    return src


def test_a_circle_through_a_function_level_import_is_found(tmp_path):
    src = _package(tmp_path, {"a.py": "from . import b\n", "b.py": "def f():\n    from .c import g\n",
                              "c.py": "import depthaudit.a\n", "d.py": "from .a import x\n"})
    edges, lines = import_graph(src)
    assert circles(edges) == [["depthaudit.a", "depthaudit.b", "depthaudit.c"]]
    assert lines["depthaudit.b", "depthaudit.c"] == [2]


def test_a_package_reexporting_a_module_that_imports_the_package_is_a_circle(tmp_path):
    src = _package(tmp_path, {"p/__init__.py": "from .m import X\n", "p/m.py": "from . import Y\n",
                              "p/ok.py": "from .m import X\n", "q.py": "from .p.ok import X\n"})
    edges, _ = import_graph(src)
    assert circles(edges) == [["depthaudit.p", "depthaudit.p.m"]]
    assert edges["depthaudit.q"] == {"depthaudit.p", "depthaudit.p.ok"}


@pytest.mark.parametrize(("module", "layer"), [("depthaudit", "foundation"), ("depthaudit.methods.fa", "methods"),
                                               ("depthaudit.report.card", "report"), ("depthaudit.__main__", "CLI")])
def test_layer_of(module, layer):
    assert LAYERS[layer_of(module)][0] == layer
