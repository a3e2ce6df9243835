"""The vocabulary registries hold: analysis/vocabulary.py is the one place a bucket, a straggler phase or a finding
id is spelled (no other module of the package and no line of the tab's index.js holds one), its "adding one"
recipe names at most six hand-edited files that exist, and every finding a real report gives is registered;
trace/sources.py is the one table of trace sources: a real trace written under each source's example name is
discovered as that source's kind, and its docstring's recipe names tests that exist.

    pytest tests/test_vocabulary.py -q
"""

from __future__ import annotations

import ast
import gzip
import json
import re
import shutil
from pathlib import Path

import pytest
from stepscope.analysis import vocabulary
from stepscope.analysis.breakdown import Breakdown
from stepscope.analysis.findings import evidence
from stepscope.analysis.verdicts import REGISTRY, VERDICTS
from stepscope.analysis.vocabulary import BUCKETS, CPU_BUCKETS, DEVICE_BUCKETS, FINDINGS, GPU_BUCKETS, PHASES
from stepscope.trace import sources
from stepscope.trace.discover import discover
from stepscope.trace.sources import SOURCES

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "trainer"
DATA = REPO / "tests" / "data"
REGISTRY_MODULE = PACKAGE / "analysis" / "vocabulary.py"
INDEX_JS = PACKAGE / "tensorboard" / "tab" / "static" / "index.js"
BUCKET_NAMES = {b.name for b in BUCKETS}
PHASE_NAMES = {p.name for p in PHASES}
FINDING_IDS = {f.id for f in FINDINGS}
NAMES = BUCKET_NAMES | PHASE_NAMES | FINDING_IDS
# The same words with another meaning, by where they are (a folder ends in "/"): nothing else may spell one.
OTHER_MEANINGS = {
    "trace/vocabulary.py": {"data": "the name of stepscope's record_function range around fetching a batch"},
    "analysis/stream_columns.py": {"data": "the name of the parse's group of data-range rows"},
    "capture/oom.py": {"fragmentation": "an out-of-memory capture's cause, written without importing the analysis",
                       "memory_creep": "the same"},
    "demo/": {"data": "the trainer's data config section and its timed data phase",
              "headroom": "stepscope verify's verify/headroom folder and its figures"},
}
# words of the tab's page that are no name of the registry's there: a chart legend's and a list's word for a
# rank marked as a straggler; the memory table's row keys of a device's headroom and fragmentation figures
JS_OTHER_MEANINGS = {"straggler", "headroom", "fragmentation"}


def _allowed(rel: str, value: str) -> bool:
    return any(value in words and (rel == where or (where.endswith("/") and rel.startswith(where)))
               for where, words in OTHER_MEANINGS.items())


def spelled(source: str, rel: str) -> list[str]:
    """Where a module (its text, its path under trainer/) spells a registry name with no other meaning there."""
    return [f"trainer/{rel}:{node.lineno}: {node.value}" for node in ast.walk(ast.parse(source, rel))
            if isinstance(node, ast.Constant) and node.value in NAMES and not _allowed(rel, node.value)]


def test_buckets_phases_and_finding_ids_are_string_literals_in_the_registry_only():
    found = [line for path in sorted(PACKAGE.rglob("*.py")) if path != REGISTRY_MODULE
             for line in spelled(path.read_text(), str(path.relative_to(PACKAGE)))]
    assert not found, found


def test_the_literal_check_finds_a_name_spelled_outside_the_registry():
    """The check above on a module that spells a bucket, a finding id and a phase: all three are found, and a
    word with another meaning only where the list says so."""
    source = 'def f(bd, cfg):\n    return bd.pct("launch"), "host_sync", {"copies": cfg["data"]}\n'
    assert sorted(line.rsplit(" ", 1)[1] for line in spelled(source, "analysis/new.py")) == [
        "copies", "data", "host_sync", "launch"]
    assert sorted(line.rsplit(" ", 1)[1] for line in spelled(source, "demo/new.py")) == ["copies", "host_sync", "launch"]


def _js_code(text: str) -> str:
    """index.js without its comments (which may name things in prose)."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(re.sub(r"(^|\s)//.*$", "", line) for line in text.splitlines())


def js_names(code: str, names: set[str]) -> list[str]:
    """The names a piece of index.js spells: as a whole string literal ('gpu_busy', "gpu_busy", `gpu_busy`) or
    as an object literal's key ({gpu_busy: ...})."""
    code = _js_code(code)
    strings = {m.group(2) for m in re.finditer(r"(['\"`])([\w.-]*)\1", code)}
    keys = {m.group(1) for m in re.finditer(r"[{,]\s*(\w+)\s*:", code)}
    return sorted((strings | keys) & names)


def test_the_tab_holds_no_bucket_phase_finding_or_verdict_name():
    """index.js gets every name and colour from the plugin's /vocabulary route: none is spelled there."""
    code = INDEX_JS.read_text()
    names = (NAMES | set(VERDICTS) | {"balanced"}) - JS_OTHER_MEANINGS
    assert not js_names(code, names), js_names(code, names)
    assert "getJSON('vocabulary')" in code
    # the check finds the table index.js held before the registry gave it its colours
    old = "const COLORS = {\n  gpu_busy: '#2e7d32', data: '#6a1b9a',\n};\nconst TONE = {gpu_bound: 'good', x: 'balanced'};"
    assert js_names(old, names) == ["balanced", "data", "gpu_bound", "gpu_busy"]


def _recipe_files(doc: str) -> list[str]:
    """The hand-edited files of the "Adding a verdict with a new bucket" recipe: its numbered items' paths."""
    recipe = doc[doc.index("Adding a verdict with a new bucket"):doc.index("Everything else follows")]
    items = re.findall(r"^\d+\. (.+?)(?=^\d+\. |\Z)", recipe, flags=re.M | re.S)
    out = []
    for item in items:
        here = "analysis/vocabulary.py" if item.startswith("here") else None
        paths = re.findall(r"(?:tests|docs|analysis|demo)/[\w/]+\.(?:py|md)", item)
        out.append(here or paths[0])
    return out


def test_adding_a_verdict_with_a_new_bucket_touches_at_most_six_files_that_exist():
    files = _recipe_files(vocabulary.__doc__)
    assert files == ["analysis/vocabulary.py", "analysis/breakdown.py", "analysis/verdicts.py",
                     "analysis/findings.py", "docs/verdicts.md", "tests/test_verdict_registry.py"]
    assert len(files) <= 6
    for f in files:
        assert (PACKAGE / f).is_file() or (REPO / f).is_file(), f
    # the one command that regenerates the golden reports is the golden test's own
    golden = (REPO / "tests" / "test_analysis_golden.py").read_text()
    (command,) = re.findall(r"^    (python -c .+)$", vocabulary.__doc__, flags=re.M)
    assert command in golden


def test_the_registry_is_consistent():
    assert len(BUCKET_NAMES) == len(BUCKETS) and len(FINDING_IDS) == len(FINDINGS) and len(PHASE_NAMES) == len(PHASES)
    assert {b.name for b in BUCKETS if b.traces in ("gpu", "any")} == set(GPU_BUCKETS)
    assert {b.name for b in BUCKETS if b.traces in ("cpu", "any")} == set(CPU_BUCKETS)
    assert set(DEVICE_BUCKETS) <= set(GPU_BUCKETS)
    assert all(set(p.buckets) <= BUCKET_NAMES for p in PHASES)
    for v in REGISTRY:
        assert set(v.buckets) <= BUCKET_NAMES and {c.finding for c in v.causes} <= FINDING_IDS, v.name
        assert v.tone in ("good", "warn")
    assert all(re.fullmatch(r"#[0-9a-f]{6}", b.colour) for b in BUCKETS)


def test_evidence_lines_take_their_labels_from_the_registry():
    bd = Breakdown(dict.fromkeys(CPU_BUCKETS, 1e3), 4e3, 1)

    class M:
        step_ms, steps = 4.0, 1

    lines = evidence(bd, M, gpu=False)[1:]
    assert lines == [f"25.0% (1.00 ms) {vocabulary.bucket(b).label_on(False)}" for b in CPU_BUCKETS]
    assert "waiting for the next batch" in lines[1]


def test_every_finding_of_the_golden_reports_is_registered():
    """The findings real traces give (tests/data/golden: the reports of tests/data's runs)."""
    seen = set()

    def walk(x):
        if isinstance(x, dict):
            if isinstance(x.get("id"), str) and "cost_ms_per_step" in x:
                seen.add(x["id"])
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    for path in sorted((DATA / "golden").glob("*.json")):
        walk(json.loads(path.read_text()))
    assert seen and seen <= FINDING_IDS, seen - FINDING_IDS


# ---------------------------------------------------------------- trace sources

HANDLER_TRACE = DATA / "big_batch" / "big_batch.1795259108694019705.pt.trace.json.gz"


@pytest.mark.parametrize("source", [s for s in SOURCES if s.example], ids=lambda s: s.kind)
def test_a_trace_under_each_sources_example_name_is_discovered_as_its_kind(source, tmp_path):
    """A real trace (an H100 run's, tensorboard_trace_handler's) written under the name the source writes."""
    path = tmp_path / "run" / source.example
    path.parent.mkdir(parents=True)
    if source.example.endswith(".gz"):
        shutil.copyfile(HANDLER_TRACE, path)
    else:
        path.write_bytes(gzip.decompress(HANDLER_TRACE.read_bytes()))
    (found,) = discover(tmp_path).traces
    assert (found.kind, found.path, found.run) == (source.kind, path, "run")
    if source.names is not None:
        worker, span = source.name_parts(path.name)
        assert (found.worker, found.span) == (worker, span)


def test_every_source_has_a_way_to_be_told():
    kinds = [s.kind for s in SOURCES]
    assert len(set(kinds)) == len(kinds)
    for s in SOURCES:
        assert s.steps in (sources.STEPS_REQUIRED, sources.STEPS_OWN, sources.STEPS_ANY), s.kind
        assert s.names is not None or s.style is not None or s.example, s.kind  # by name, by marks or by layout
        assert (s.style is None) == (not (s.marks or s.contains or s.frames)), s.kind


def test_the_sources_recipe_names_tests_that_exist():
    doc = sources.__doc__
    recipe = doc[doc.index("Adding a trace source"):]
    named = re.findall(r"tests/[\w/]+\.py", recipe)
    assert "tests/test_vocabulary.py" in named and len(named) >= 2
    for f in named:
        assert (REPO / f).is_file(), f


def test_names_are_told_as_the_table_says():
    assert sources.of_name("fit-m-[Strategy]SingleDeviceStrategy.training_step.3.pt.trace.json") == (
        sources.LIGHTNING, "fit-m-[Strategy]SingleDeviceStrategy.training_step", "3")
    assert sources.of_name("host_1.pt.trace.json.gz") == (sources.HANDLER, "host_1", "")
    assert sources.of_name("profile_0.json") is None  # any JSON file could bear it: only once sniffed
    assert sources.of_name("profile_0.json", sniffed=True) == (sources.ACCELERATE, "profile_0", "")
    assert sources.of_name("notes.json.gz", sniffed=True) == (sources.CHROME, "notes", "")
    assert sources.loop_source({"[Strategy]SingleDeviceStrategy.training_step"}, ()).style == "lightning"
    assert sources.loop_source({"## Call CompiledFxGraph f3a ##"}, ()).style == "compiled"
    assert sources.loop_source({"ProfilerStep#3"}, ()) is None
