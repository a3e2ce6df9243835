"""The floor plan holds: the package's rooms are the top-level folders of trainer/, the demonstration trainer is
one room that nothing else builds on, the benchmarks stay out of the package, no module imports itself back
at import time, and the README's map is the tree.

    python -m pytest -q tests/test_house.py      # seconds: it reads the source (and runs `stepscope --help`)

The import graph is read from the source with ``ast``: an edge for each ``import`` and ``from ... import``
of a ``stepscope`` module, pointing at the most specific module that exists (``from stepscope.analysis
import render`` is an edge to stepscope.analysis.render when that is a module, else to the package). An
import at a module's top level (inside ``if``/``try`` too, but not under ``if TYPE_CHECKING:``) runs when the
module is imported; one inside a function runs when the function is called, and is "lazy".
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: tomli, which pytest itself needs there
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "trainer"  # the package `stepscope`
KERNELS = REPO / "kernels"  # `stepscope.kernels`
ROOMS = {"trace", "analysis", "report", "plugin_copy", "capture", "integrations", "tensorboard", "cli", "demo"}
DEMO = "stepscope.demo"
# The one place outside the demo that reaches it: the `stepscope train` subcommand, inside its function.
DEMO_DOOR = "stepscope.cli.main"


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module (most specific that exists), or the import's top name outside stepscope
    lazy: bool  # inside a function
    line: int


def module_name(path: Path) -> str:
    if path.is_relative_to(KERNELS):
        parts = ["stepscope", "kernels", *path.relative_to(KERNELS).with_suffix("").parts]
    else:
        parts = ["stepscope", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_files() -> dict[str, Path]:
    files = [*PACKAGE.rglob("*.py"), *KERNELS.glob("*.py")]
    return {module_name(p): p for p in files}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(body: list[ast.stmt], lazy: bool):
    """(node, lazy) for every import statement, skipping ``if TYPE_CHECKING:`` blocks."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, lazy
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield from _import_nodes(node.body, True)
        elif isinstance(node, ast.If) and _is_type_checking(node):
            yield from _import_nodes(node.orelse, lazy)
        else:
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                children = getattr(node, field, None)
                if isinstance(children, list):
                    yield from _import_nodes([c for c in children if isinstance(c, ast.AST)], lazy)


def imports(modules: dict[str, Path]) -> list[Import]:
    found = []
    for source, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        for node, lazy in _import_nodes(tree.body, False):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:  # relative: resolved against the importing module's package
                    package = source.split(".") if is_package else source.split(".")[:-1]
                    package = package[:len(package) - (node.level - 1)]
                    base = ".".join([*package, base] if base else package)
                names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                         for alias in node.names]
            for name in names:
                if name.split(".")[0] != "stepscope":
                    found.append(Import(source, name.split(".")[0], lazy, node.lineno))
                    continue
                while name and name not in modules:
                    name = name.rpartition(".")[0]
                if name and name != source:
                    found.append(Import(source, name, lazy, node.lineno))
    return found


@pytest.fixture(scope="module")
def graph() -> list[Import]:
    return imports(package_files())


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm, iterative)."""
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
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_cycles_finds_a_cycle_and_only_a_cycle():
    """The check below can fail: a loop of three is found, a chain is not."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_module_imports_itself_back_at_import_time(graph):
    edges: dict[str, set[str]] = {m: set() for m in package_files()}
    for edge in graph:
        if not edge.lazy and edge.target.startswith("stepscope"):
            edges[edge.source].add(edge.target)
    assert cycles(edges) == []


def room_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "stepscope" else None


def test_the_rooms_build_on_each_other_in_one_direction(graph):
    """Rooms stack: no room reaches back into one that builds on it, at import time or inside a function. The
    one exception is the demo's door, `stepscope train` (cli/main.py reaches into the demo it launches)."""
    edges: dict[str, set[str]] = {}
    for edge in graph:
        a, b = room_of(edge.source), room_of(edge.target)
        if a is None or b is None or a == b or (edge.source == DEMO_DOOR and b == "demo"):
            continue
        edges.setdefault(a, set()).add(b)
        edges.setdefault(b, set())
    assert cycles(edges) == []
    assert "cli" not in edges["tensorboard"] and "tensorboard" not in edges["analysis"]


def test_the_rooms_are_the_top_level_folders_of_the_package():
    """Every top-level folder of trainer/ that holds Python is a room, and nothing but __init__.py (the public
    API) lies beside them: the demonstration trainer is a room of its own, not loose modules."""
    folders = {p.name for p in PACKAGE.iterdir()
               if p.is_dir() and not p.name.startswith((".", "_")) and any(p.rglob("*.py"))}
    assert folders == ROOMS
    assert all((PACKAGE / room / "__init__.py").is_file() for room in ROOMS)
    assert [p.name for p in PACKAGE.glob("*.py")] == ["__init__.py"]


def test_every_room_says_what_it_holds():
    for room in sorted(ROOMS):
        doc = ast.get_docstring(ast.parse((PACKAGE / room / "__init__.py").read_text()))
        assert doc and len(doc.split()) >= 8, f"trainer/{room}/__init__.py needs a docstring saying what it holds"


def test_the_wheel_lists_every_package_folder():
    """pyproject.toml names each package of the wheel by hand: a folder with an __init__.py left off the list
    would be missing from the installed package."""
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {module_name(p.parent / "__init__.py") for p in PACKAGE.rglob("__init__.py")}
    assert listed == on_disk | {"stepscope.kernels"}
    assert not [p for p in listed if "bench" in p]


def test_only_the_train_subcommand_reaches_into_the_demo(graph):
    outside = [e for e in graph if e.target == DEMO or e.target.startswith(DEMO + ".")]
    outside = [e for e in outside if not (e.source == DEMO or e.source.startswith(DEMO + "."))]
    assert outside, "the `stepscope train` subcommand runs the demo: the graph must show that edge"
    wrong = [e for e in outside if not (e.source == DEMO_DOOR and e.lazy)]
    assert wrong == []


def test_the_demo_is_named_only_in_the_command_and_api_tables():
    """Modules loaded by name (importlib) count too: outside the demo, a "stepscope.demo..." string appears only in
    the `stepscope` command's table (train, compare, verify) and the public API's (stepscope.compare)."""
    named = {}
    for module, path in package_files().items():
        if module == DEMO or module.startswith(DEMO + "."):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith(DEMO):
                named.setdefault(module, set()).add(node.value)
    assert set(named) <= {DEMO_DOOR, "stepscope"}, named


def test_nothing_in_the_package_imports_the_benchmarks(graph):
    """The benchmark library is scripts/bench/ (`import bench`), which is not installed with the package."""
    assert not [e for e in graph if e.target == "bench"]
    assert not (PACKAGE / "bench").exists()


def test_the_command_lists_no_benchmark_subcommand():
    r = subprocess.run([sys.executable, "-m", "stepscope.cli.main", "--help"], capture_output=True, text=True,
                       timeout=120, cwd=REPO)
    assert r.returncode == 0, r.stderr
    (usage,) = re.findall(r"usage: stepscope \{([^}]*)\}", r.stdout)
    listed = {n.strip() for n in usage.split(",")}
    assert {"train", "analyze", "compare", "tensorboard", "verify", "diff"} <= listed
    assert not [n for n in listed if "bench" in n] and "bench" not in r.stdout


def readme_map(readme: str) -> list[str]:
    """The folders the README's map names, as repository paths ("trainer/trace", "scripts/bench", ...)."""
    m = re.search(r"^## The map\n.*?^```\n(.*?)^```", readme, re.S | re.M)
    assert m, "README.md must hold its map as a fenced block under '## The map'"
    folders, parent = [], None
    for line in m.group(1).splitlines():
        entry = re.match(r"^( *)(\S+)/\s", line + " ")
        assert entry, f"each line of the map starts with a folder: {line!r}"
        indent, name = entry.groups()
        if not indent:
            parent = name
            folders.append(name)
        else:
            assert parent and len(indent) == 2, f"a sub-folder sits two spaces under its folder: {line!r}"
            folders.append(f"{parent}/{name}")
    return folders


def map_problems(named: list[str]) -> list[str]:
    """What the map gets wrong about the tree: folders that do not exist, rooms or top-level folders left out."""
    problems = [f"{f}: no such folder" for f in named if not (REPO / f).is_dir()]
    problems += [f"{f}: named twice" for f in sorted({f for f in named if named.count(f) > 1})]
    top = {f for f in named if "/" not in f}
    problems += [f"{f}/: not on the map" for f in sorted({"trainer", "kernels", "scripts", "tests", "docs"} - top)]
    rooms = {f.split("/")[1] for f in named if f.startswith("trainer/")}
    problems += [f"trainer/{r}/: room not on the map" for r in sorted(ROOMS - rooms)]
    libraries = {p.parent.name for p in (REPO / "scripts").glob("*/__init__.py")}  # scripts/bench/
    shown = {f.split("/")[1] for f in named if f.startswith("scripts/")}
    problems += [f"scripts/{b}/: not on the map" for b in sorted(libraries - shown)]
    return problems


def test_the_readme_map_is_the_tree():
    named = readme_map((REPO / "README.md").read_text())
    assert "scripts/bench" in named and "trainer/demo" in named
    assert map_problems(named) == []


def test_a_map_that_is_not_the_tree_is_caught():
    readme = (REPO / "README.md").read_text()
    stale = readme.replace("\n  demo/ ", "\n  serve/ ", 1)  # a room renamed on the map only
    assert stale != readme
    assert map_problems(readme_map(stale)) == ["trainer/serve: no such folder", "trainer/demo/: room not on the map"]
