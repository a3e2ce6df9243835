"""The PyTorch Profiler tab as a user sees it, offline: headless Chromium (Debian's `chromium`, through
Playwright) against `stepscope tensorboard` on 127.0.0.1, every request off the host blocked and recorded.

    apt-get update && apt-get install -y chromium
    pytest -m browser tests/test_profiler_tab_browser.py           # every view of every run: about 3 minutes on 2 idle cores
    pytest -q tests/test_profiler_tab_browser.py                   # the default set: each view once (DEFAULT_CASES)
    STEPSCOPE_DOCS_SCREENSHOTS=1 pytest -m browser tests/test_profiler_tab_browser.py   # also rewrites docs/profiler-*.png

DIR holds four runs: a CPU run the trainer makes here (scripts/train.py --profile), a user's loop profiled on
an H200 through stepscope.schedule and stepscope.trace_handler (tests/data/loops_h200/vit_pageable), a
data-bound run whose DataLoader takes most of the step (tests/data/slow_dataset) and a 2-rank NCCL job
(tests/data/nccl_ddp). One `stepscope tensorboard` serves them and one page goes through every view of
each run (by default each view once, DEFAULT_CASES; the others are in the slow set). Each view must draw (no
spinner left, no chart that says it could not draw, no error banner), and
what it draws is compared with the plugin's own HTTP API for the same run, worker and span: the Overview's
execution summary, step-time breakdown and pie; the operator and kernel pies and tables with device time;
the Memory curve; the Trace view's timeline; the Module view's table and timeline; the Distributed view's
charts and tables. No request may leave 127.0.0.1. Screenshots (one per view) go to $STEPSCOPE_ARTIFACTS
(default test-artifacts/) as profiler-<run>-<view>.png.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
from pathlib import Path

import pytest
from browser_helpers import CHROMIUM, INSTALL_HINT, artifacts_dir, launch_chromium, open_page
from few_by_default import few_by_default
from stepscope.tensorboard.tbserver import free_port, loopback_get
from trainrun import run_train

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not CHROMIUM.exists(), reason=f"no {CHROMIUM}; install it with: {INSTALL_HINT}")]
sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright: pip install -e '.[dev]'")

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
DOCS = REPO / "docs"
PLUGIN = "/data/plugin/pytorch_profiler"
DRAW_TIMEOUT_MS = 60_000  # one view drawn: the plugin answers in seconds; the Trace view imports the whole trace
TRAINER_ARGS = ["--device", "cpu", "--arch", "lenet", "--synthetic-train-size", "256", "--synthetic-eval-size", "32",
                "--batch-size", "16", "--workers", "0", "--log-every", "4", "--steps", "8", "--profile",
                "--skip-first", "0", "--wait", "1", "--warmup", "1", "--active", "3", "--repeat", "1"]
# run -> what the logdir gets; "trainer" is made by scripts/train.py in the fixture
COPIES = {"loop": DATA / "loops_h200" / "vit_pageable", "data_bound": DATA / "slow_dataset",
          "ddp": DATA / "nccl_ddp"}
GPU_RUNS = ("loop", "data_bound", "ddp")
# the views each run must offer (the plugin's names; the menu says "GPU Kernel" for Kernel)
VIEWS = {"trainer": ["Overview", "Operator", "Trace", "Memory", "Module"],
         "loop": ["Overview", "Operator", "Kernel", "Trace", "Memory", "Module"],
         "data_bound": ["Overview", "Operator", "Kernel", "Trace", "Memory", "Module"],
         "ddp": ["Overview", "Operator", "Kernel", "Trace", "Distributed", "Memory"]}
MENU = {"Kernel": "GPU Kernel"}
CASES = [(run, view) for run, views in VIEWS.items() for view in views]
# By default each view is drawn once, on a run that takes each branch of its check: Overview on the CPU run
# (no device time) and on the data-bound GPU run (device time, DataLoader the largest part); Operator on the
# CPU run and on a GPU run (device time in the pies and the table); Kernel, Memory, Trace and Module on one GPU
# run each, and Distributed on the 2-rank job. The other cases take the same checks on other data: slow.
DEFAULT_CASES = ["trainer-Overview", "data_bound-Overview", "trainer-Operator", "loop-Operator", "loop-Kernel",
                 "loop-Memory", "data_bound-Trace", "data_bound-Module", "ddp-Distributed"]
# the views whose screenshot documents the tab (docs/tensorboard.md)
DOC_SHOTS = {("data_bound", "Overview"), ("loop", "Operator"), ("loop", "Kernel"), ("data_bound", "Trace"),
             ("loop", "Memory"), ("data_bound", "Module"), ("ddp", "Distributed")}

# Everything each chart drew: its kind, the series ECharts renders (names and data), the SVG shapes and
# texts on screen; for a Table, the text of each row.
CHARTS_JS = """() => [...document.querySelectorAll('[data-chart]')].map(el => {
  const ec = window.echarts && echarts.getInstanceByDom(el);
  const o = ec ? ec.getOption() : null;
  return {kind: el.dataset.chart,
          series: o ? o.series.map(s => ({name: s.name, type: s.type, data: s.data})) : null,
          shapes: el.querySelectorAll('svg path, svg rect').length,
          texts: [...el.querySelectorAll('svg text')].map(t => t.textContent),
          rows: [...el.querySelectorAll('tr')].map(tr => [...tr.children].map(td => td.textContent.trim()))};
})"""
# The Trace view's model, as the trace viewer imported it: processes, slices, ProfilerStep# slices.
# Read from the tab's page through the Trace view's frame (trace_embedding.html, same origin).
TRACE_JS = """() => {
  const frame = document.querySelector('iframe[src$="trace_embedding.html"]');
  const doc = frame && frame.contentDocument;
  if (!doc) return null;
  const v = doc.querySelector('#trace-viewer');
  // the frame's HTML Imports polyfill wraps its DOM: its NodeLists are not iterable
  const overlay = Array.prototype.slice.call(doc.querySelectorAll('tr-ui-b-overlay')).some(o => o.visible);
  if (!v || !v.model || overlay) return null;
  let slices = 0, steps = 0;
  v.model.getAllThreads().forEach(t => t.sliceGroup.slices.forEach(s => {
    slices++; if (/^ProfilerStep#\\d+$/.test(s.title)) steps++; }));
  return {processes: Object.keys(v.model.processes).length, slices: slices, steps: steps};
}"""


class Served:
    """The running `stepscope tensorboard`, and GETs of its plugin's API."""

    def __init__(self, proc: subprocess.Popen, port: int, log: Path) -> None:
        self.proc, self.port, self.log = proc, port, log
        self.base = f"http://127.0.0.1:{port}"

    def api(self, route: str, **params):
        body = loopback_get(f"{self.base}{PLUGIN}/{route}?{urllib.parse.urlencode(params)}")
        return json.loads(body)

    def wait_for_runs(self, runs: list[str], timeout_s: float) -> None:
        t0, seen = time.monotonic(), {}
        while time.monotonic() - t0 < timeout_s:
            assert self.proc.poll() is None, f"exited {self.proc.returncode}: {self.log.read_text()[-3000:]}"
            try:
                seen = self.api("runs")
            except (urllib.error.URLError, ConnectionError):
                seen = {}
            if set(runs) <= set(seen.get("runs", [])) and not seen.get("loading", True):
                return
            time.sleep(0.5)
        raise TimeoutError(f"plugin lists {seen}, wanted {runs}: {self.log.read_text()[-3000:]}")

    def worker_span(self, run: str, view: str) -> tuple[str, str]:
        worker = self.api("workers", run=run, view=view)[0]
        return worker, self.api("spans", run=run, worker=worker)[0]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    src = tmp_path_factory.mktemp("profiler-tab") / "runs"
    r = run_train([*TRAINER_ARGS, "--logdir", str(src), "--run-name", "trainer"], env={"OMP_NUM_THREADS": "1"},
                  timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    for name, folder in COPIES.items():
        shutil.copytree(folder, src / name)
    port = free_port()
    log = src.parent / "stepscope-tensorboard.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, str(REPO / "tests" / "stepscope_here.py"), "tensorboard",
                                 "--logdir", str(src), "--port", str(port), "--poll", "0.5"],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    s = Served(proc, port, log)
    try:
        s.wait_for_runs(list(VIEWS), timeout_s=300)
        yield s
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


class Tab:
    """One browser page on TensorBoard's #pytorch_profiler, reused by every test of the module."""

    def __init__(self, page, traffic, base: str) -> None:
        self.page, self.traffic, self.base = page, traffic, base
        self.errors: list[str] = []
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.goto(f"{base}/#pytorch_profiler")
        self.outer = page.frame_locator('iframe[src*="plugin_entry.html?name=pytorch_profiler"]')
        self.outer.locator('[aria-haspopup="listbox"]').first.wait_for(timeout=DRAW_TIMEOUT_MS)
        self.run = self.view = None

    @property
    def frame(self):
        (f,) = [f for f in self.page.frames if f.url.split("?")[0].endswith(f"{PLUGIN}/index.html")]
        return f

    def choose(self, index: int, label: str) -> None:
        """Pick ``label`` in the sidebar's index-th menu (0 Runs, 1 Views, 2 Workers)."""
        self.outer.locator('[aria-haspopup="listbox"]').nth(index).click()
        self.outer.locator('li[role="option"]', has_text=re.compile(f"^{re.escape(label)}$")).first.click()

    def open(self, run: str, view: str) -> None:
        self.errors.clear()  # each view answers for its own script errors
        if run != self.run:
            self.choose(0, run)
            self.run, self.view = run, None
            self.outer.locator('[aria-haspopup="listbox"]').nth(1).filter(has_text="Overview").wait_for()
        if view != self.view:
            self.choose(1, MENU.get(view, view))
            self.view = view

    def charts(self, kinds: dict[str, int]) -> list[dict]:
        """Wait until at least kinds[k] charts of each kind have drawn, then what every chart drew."""
        deadline = time.monotonic() + DRAW_TIMEOUT_MS / 1000
        drawn: list[dict] = []
        while time.monotonic() < deadline:
            drawn = self.frame.evaluate(CHARTS_JS)
            have = {k: sum(1 for c in drawn if c["kind"] == k and (c["shapes"] or c["rows"])) for k in kinds}
            if all(have[k] >= n for k, n in kinds.items()):
                time.sleep(0.3)  # let React settle the last requests
                return self.frame.evaluate(CHARTS_JS)
            time.sleep(0.25)
        self.fail(f"waited {DRAW_TIMEOUT_MS / 1000:.0f}s for charts {kinds}; drawn: "
                  f"{[(c['kind'], c['shapes']) for c in drawn]}")

    def fail(self, why: str) -> None:
        pytest.fail(f"{self.run}/{self.view}: {why}; {self.said()}")

    def said(self) -> str:
        f = self.frame
        banner = f.locator("#stepscope-page-error")
        return (f"page errors {self.errors}; banner {banner.inner_text() if banner.count() else None!r}; "
                f"spinners {f.locator('main [role=progressbar]').count()}; blocked {self.traffic.blocked}")

    def assert_drawn(self) -> None:
        """Nothing spins, nothing says it could not draw, nothing left the host."""
        f = self.frame
        assert f.locator(".stepscope-chart-error").count() == 0, f.locator(".stepscope-chart-error").all_inner_texts()
        assert f.locator("#stepscope-page-error").count() == 0, f.locator("#stepscope-page-error").inner_text()
        assert f.locator("main [role=progressbar]").count() == 0, f"{self.run}/{self.view} still spins"
        assert not self.errors, self.errors
        assert self.traffic.blocked == [], self.traffic.blocked

    def screenshot(self, run: str, view: str) -> None:
        name = f"profiler-{run}-{view.lower()}.png"
        path = artifacts_dir() / name
        self.page.screenshot(path=str(path))
        if os.environ.get("STEPSCOPE_DOCS_SCREENSHOTS") and (run, view) in DOC_SHOTS:
            from PIL import Image  # matplotlib's dependency; scaled down to 128 colours, docs/ stays small

            im = Image.open(path).convert("RGB")
            im = im.resize((im.width * 3 // 5, im.height * 3 // 5), Image.LANCZOS)
            im.quantize(colors=128).save(DOCS / f"profiler-{view.lower()}.png", optimize=True)


@pytest.fixture(scope="module")
def tab(served):
    with sync_api.sync_playwright() as p:
        browser = launch_chromium(p)
        context, page, traffic = open_page(browser)
        try:
            yield Tab(page, traffic, served.base)
        finally:
            context.close()
            browser.close()


def by_kind(charts: list[dict], kind: str) -> list[dict]:
    return [c for c in charts if c["kind"] == kind]


def top(rows: list[list], n: int = 10) -> list[list]:
    """What the plugin's pies draw of a table: its n largest rows (index.js sorts and cuts them)."""
    return sorted(rows, key=lambda r: -r[1])[:n]


def pie_matches(chart: dict, rows: list[list]) -> None:
    drawn = [(d["name"], d["value"]) for d in chart["series"][0]["data"]]
    assert drawn == [(r[0], pytest.approx(r[1])) for r in top(rows)]
    assert chart["shapes"] >= len(drawn)  # a slice each, and the legend


def numbers(text: str) -> float:
    return float(text.replace(",", ""))


def test_every_run_offers_its_views(served):
    for run, views in VIEWS.items():
        assert served.api("views", run=run) == views, run


@pytest.mark.parametrize("case", few_by_default(CASES, DEFAULT_CASES, ids=[f"{r}-{v}" for r, v in CASES]))
def test_view_draws_what_the_api_says(served, tab, case):
    run, view = case
    tab.open(run, view)
    check = CHECKS[view]
    check(served, tab, run)
    tab.assert_drawn()
    tab.screenshot(run, view)


def check_overview(served, tab, run):
    worker, span = served.worker_span(run, "Overview")
    api = served.api("overview", run=run, worker=worker, span=span)
    perf = api["performance"][0]
    parts = {c["name"]: c["value"] for c in perf["children"]}
    charts = tab.charts({"Table": 1, "PieChart": 1, "SteppedAreaChart": 1})
    # the execution summary: one row per category, the plugin's numbers
    (table,) = by_kind(charts, "Table")
    rows = {r[0]: r[1:] for r in table["rows"][1:]}
    assert numbers(rows["Average Step Time"][0]) == perf["value"]
    for name, value in parts.items():
        assert numbers(rows[name][0]) == value, name
    # the step-time breakdown: one stacked series per category, every step's value
    (steps,) = by_kind(charts, "SteppedAreaChart")
    columns = {c["name"]: i for i, c in enumerate(api["steps"]["columns"]) if i and not c.get("role")}
    assert [s["name"] for s in steps["series"]] == list(columns)
    for s in steps["series"]:
        assert s["data"] == [pytest.approx(r[columns[s["name"]]]) for r in api["steps"]["rows"]], s["name"]
    assert steps["shapes"] >= len(api["steps"]["rows"]) * sum(1 for v in parts.values() if v)
    (pie,) = by_kind(charts, "PieChart")
    assert {d["name"]: d["value"] for d in pie["series"][0]["data"]} == {k: pytest.approx(v) for k, v in parts.items()}
    # what the run's trace says: device work where there is a GPU, the DataLoader where it dominates
    if run in GPU_RUNS:
        assert parts["Kernel"] > 0 and parts["Runtime"] > 0 and parts["CPU Exec"] > 0, parts
    else:
        assert parts["CPU Exec"] > 0 and parts.get("Kernel", 0) == 0, parts
    if run == "data_bound":
        assert parts["DataLoader"] == max(parts.values()), parts


def check_operator(served, tab, run):
    worker, span = served.worker_span(run, "Operator")
    pies = served.api("operation", run=run, worker=worker, span=span, group_by="Operation")
    table = served.api("operation/table", run=run, worker=worker, span=span, group_by="Operation")["data"]
    names = ["device_self_time", "device_total_time", "host_self_time", "host_total_time"]
    present = [n for n in names if pies.get(n)]
    device_ms = sum(r[1] for r in (pies.get("device_self_time") or {}).get("rows", []))
    assert (device_ms > 0) == (run in GPU_RUNS), device_ms
    charts = tab.charts({"PieChart": len(present)})
    drawn = by_kind(charts, "PieChart")
    assert len(drawn) == len(present)
    for chart, name in zip(drawn, present):
        pie_matches(chart, pies[name]["rows"])
    # the operator table (the plugin's own table widget) with its device time
    sort = "device_self_duration" if run in GPU_RUNS else "host_self_duration"
    first = max(table, key=lambda r: r[sort])
    row = tab.frame.locator(".ant-table-tbody tr", has=tab.frame.locator("td", has_text=re.compile(
        f"^{re.escape(first['name'])}$"))).first
    cells = row.locator("td").all_inner_texts()
    assert str(first[sort]) in cells, (first, cells)
    if run in GPU_RUNS:
        assert first["device_self_duration"] > 0
        assert "Device Self Duration (us)" in " ".join(tab.frame.locator(".ant-table-thead").all_inner_texts()
                                                        ).replace("\n", " ")


def check_kernel(served, tab, run):
    worker, span = served.worker_span(run, "Kernel")
    pie = served.api("kernel", run=run, worker=worker, span=span, group_by="Kernel")
    table = served.api("kernel/table", run=run, worker=worker, span=span, group_by="Kernel")["data"]
    charts = tab.charts({"PieChart": 2})
    drawn = by_kind(charts, "PieChart")
    pie_matches(drawn[0], pie["total"]["rows"])
    cols = [c["name"] for c in table["columns"]]
    total = cols.index("Total Duration (us)")
    first = max(table["rows"], key=lambda r: r[total])
    assert first[total] > 0
    row = tab.frame.locator(".ant-table-tbody tr").filter(has_text=first[0][:40]).first
    assert str(first[total]) in row.locator("td").all_inner_texts()


def check_memory(served, tab, run):
    worker, span = served.worker_span(run, "Memory")
    curve = served.api("memory_curve", run=run, worker=worker, span=span)
    device = curve["metadata"]["default_device"]
    rows = curve["rows"][device]
    charts = tab.charts({"LineChart": 1})
    (line,) = by_kind(charts, "LineChart")
    assert [s["name"] for s in line["series"]] == [c["name"] for c in curve["columns"][1:]]
    for i, s in enumerate(line["series"]):
        assert s["data"] == [[pytest.approx(r[0]), pytest.approx(r[i + 1])] for r in rows], s["name"]
    assert max(r[1] for r in rows) > 0
    assert line["shapes"] >= 2


def count_nodes(node: dict) -> int:
    return 1 + sum(count_nodes(c) for c in node.get("children", []))


def check_module(served, tab, run):
    worker, span = served.worker_span(run, "Module")
    modules = served.api("module", run=run, worker=worker, span=span)
    tree = served.api("tree", run=run, worker=worker, span=span)
    charts = tab.charts({"Timeline": 1})
    (timeline,) = by_kind(charts, "Timeline")
    assert len(timeline["series"][0]["data"]) == count_nodes(tree)
    assert timeline["shapes"] >= 3
    top_module = modules["data"][0]["name"]
    tab.frame.locator(".ant-table-tbody td", has_text=top_module).first.wait_for()


def check_trace(served, tab, run):
    worker, span = served.worker_span(run, "Trace")
    steps = served.api("overview", run=run, worker=worker, span=span)["steps"]["rows"]
    deadline, model = time.monotonic() + DRAW_TIMEOUT_MS / 1000, None
    while model is None and time.monotonic() < deadline:
        model = tab.frame.evaluate(TRACE_JS)
        time.sleep(0.5)
    if model is None:
        tab.fail("the trace viewer never showed the trace")
    assert model["processes"] >= 1 and model["slices"] > 100, model
    # the plugin's Overview counts the steps the trace viewer shows as ProfilerStep# slices
    assert model["steps"] >= len(steps), (model, len(steps))


def check_distributed(served, tab, run):
    overlap = served.api("distributed/overlap", run=run, worker="All", span="1")
    wait = served.api("distributed/waittime", run=run, worker="All", span="1")
    ops = served.api("distributed/commops", run=run, worker="All", span="1")
    charts = tab.charts({"ColumnChart": 2, "Table": 1})
    columns = by_kind(charts, "ColumnChart")
    for chart, api in zip(columns, (overlap, wait)):
        assert [s["name"] for s in chart["series"]] == api["metadata"]["legends"]
        step = "all" if "all" in api["data"] else next(iter(api["data"]))
        workers = list(api["data"][step])
        for i, s in enumerate(chart["series"]):
            assert s["data"] == [pytest.approx(api["data"][step][w][i]) for w in workers], s["name"]
    (table,) = by_kind(charts, "Table")
    worker = next(iter(ops["data"]))
    api_rows = {r[0]: r for r in ops["data"][worker]["rows"]}
    drawn = {r[0]: r for r in table["rows"][1:]}
    assert set(drawn) == set(api_rows)
    for name, r in api_rows.items():
        assert numbers(drawn[name][1]) == r[1], name  # calls


CHECKS = {"Overview": check_overview, "Operator": check_operator, "Kernel": check_kernel, "Trace": check_trace,
          "Memory": check_memory, "Module": check_module, "Distributed": check_distributed}


def test_pages_load_nothing_from_another_host(served, tab):
    """The two pages the tab serves name no other host in any script, link or frame."""
    for page in ("index.html", "trace_embedding.html"):
        html = loopback_get(f"{served.base}{PLUGIN}/{page}").decode()
        remote = re.findall(r'<(?:script|link|iframe)[^>]+(?:src|href)="((?:https?:)?//[^"]*)"', html)
        assert remote == [], (page, remote)
    assert tab.traffic.blocked == []


def test_a_chart_that_cannot_draw_says_so(tab):
    """An unknown chart type and a script error are said in words on the page, not left spinning."""
    said = tab.frame.evaluate("""() => {
      const box = document.createElement('div');
      document.body.appendChild(box);
      new google.visualization.GeoChart(box).draw(google.visualization.arrayToDataTable([['a', 'b'], ['x', 1]]), {});
      setTimeout(() => { throw new Error('a view broke'); }, 0);
      return box.innerText;
    }""")
    assert "GeoChart could not be drawn" in said
    banner = tab.frame.locator("#stepscope-page-error")
    banner.filter(has_text="a view broke").wait_for(timeout=5000)
    text = banner.inner_text()
    assert "This view cannot draw" in text and "GeoChart" in text and "script error" in text
    tab.errors.clear()


def test_a_failed_api_request_says_so(served, tab):
    tab.frame.evaluate(f"() => fetch('{PLUGIN}/overview?run=no-such-run&worker=w&span=1').catch(() => null)")
    tab.frame.locator("#stepscope-page-error").filter(has_text="the plugin answered").wait_for(timeout=5000)
