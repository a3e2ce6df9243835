"""The stepscope tab in a real browser: headless Chromium (Debian's `chromium`) through Playwright, against a
real TensorBoard on 127.0.0.1 that found the plugin through its entry point (torch-tb-profiler's plugin left
out: browser_helpers.TensorBoardWithoutProfilerTab).

    apt-get update && apt-get install -y chromium
    pytest -m browser tests/test_tab_browser.py

The logdir holds a CPU run the trainer makes here (6 profiled steps: the trace a window is cut from), a
2-rank job with a straggler, and a compare pair (tests/data). Every test asserts what the page shows and
that no request left 127.0.0.1. Screenshots go to $STEPSCOPE_ARTIFACTS (default test-artifacts/):
tab-runs.png, tab-run.png, tab-ranks.png (and tab-ranks-full.png), tab-diff.png, tab-window.png.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest
import torch
from browser_helpers import CHROMIUM, INSTALL_HINT, TensorBoardWithoutProfilerTab, artifacts_dir
from stepscope.capture.oom import OomCapture
from stepscope.report.front import analyze
from stepscope.tensorboard.tab.plugin import window_root
from trainrun import run_train

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not CHROMIUM.exists(), reason=f"no {CHROMIUM}; install it with: {INSTALL_HINT}")]
sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright: pip install -e '.[dev]'")

DATA = Path(__file__).resolve().parent / "data"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
CPU_RUN = "cpu_lenet"
CPU_ARGS = ["--device", "cpu", "--arch", "lenet", "--synthetic-train-size", "256", "--synthetic-eval-size", "32",
            "--batch-size", "16", "--workers", "0", "--log-every", "4", "--steps", "16", "--profile",
            "--skip-first", "0", "--wait", "1", "--warmup", "1", "--active", "5", "--repeat", "2"]
CYCLES = 2  # ProfilerStep#2-#6 and #9-#13
TIMEOUT_MS = 60_000
SCREENSHOTS = {"test_runs_list_shows_every_run_with_its_verdict": "runs",
               "test_run_view_shows_the_verdict_card_bars_and_top_ops": "run",
               "test_multi_rank_job_marks_the_straggler_and_says_why": "ranks",
               "test_hundreds_of_ranks_are_a_sorted_distribution": "wide",
               "test_two_runs_side_by_side": "diff", "test_window_of_steps_becomes_a_run_for_both_tabs": "window",
               "test_a_multi_cycle_run_shows_the_cycle_its_headline_names": "cycles",
               "test_memory_view_draws_the_reports_figures": "memory"}
MEM_RUN = "resnet50_pinned"  # a GPU trace recorded with profile_memory=True
OOM_MESSAGE = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which "
               "1.00 GiB is free. Of the allocated memory 70.00 GiB is allocated by PyTorch, and 3.00 GiB is reserved "
               "by PyTorch but unallocated. <img src=x onerror=alert(1)>")
LOOPBACK = re.compile(r"^(https?://127\.0\.0\.1[:/]|data:|blob:|about:)")


WIDE_RANKS = 66  # more than the tab draws as bars (MAX_BARS = 64 in index.js)
CYCLE_RUN, MANY_CYCLES = "cycles", 6  # a plain torch.profiler loop of 6 cycles; the last one's step is a sleep


def cycle_loop(folder: Path, n: int) -> None:
    """A plain torch.profiler loop of ``n`` cycles, run in this process (torch is imported here anyway)."""
    x, w = torch.randn(128, 256), torch.randn(256, 256)
    sched = torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=n)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                                on_trace_ready=torch.profiler.tensorboard_trace_handler(str(folder))) as prof:
        for i in range(n * 4):
            if i // 4 == n - 1:
                time.sleep(0.08)  # the host waits between ops: host_bound
                (x[:8] @ w).relu_()
            else:
                for _ in range(3):
                    (x @ w).relu_()  # torch ops fill the step: cpu_bound
            prof.step()


def write_wide_job(folder: Path, ranks: int) -> None:
    """A job of ``ranks`` ranks from the 2-rank straggler job's real traces: every rank but the last is a
    copy of its steady rank 0, the last one of its straggling rank 1, each with its own distributedInfo.
    Named like export_chrome_trace files, which stepscope finds and torch-tb-profiler leaves alone (its
    loader would start a process per trace on the shared test machine)."""
    src = DATA / "suite_ddp" / "straggler"
    steady, slow = (json.loads(gzip.decompress(next(src.glob(f"straggler_rank{r}.*")).read_bytes())) for r in (0, 1))
    folder.mkdir(parents=True)
    for rank in range(ranks):
        trace = slow if rank == ranks - 1 else steady
        trace["distributedInfo"] = {**trace["distributedInfo"], "rank": rank, "world_size": ranks}
        name = f"job_rank{rank}.json.gz"
        (folder / name).write_bytes(gzip.compress(json.dumps(trace).encode(), 1))


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("tab") / "logs"
    r = run_train([*CPU_ARGS, "--logdir", str(logdir), "--run-name", CPU_RUN],
                  env={"OMP_NUM_THREADS": "1"}, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    shutil.copytree(DATA / "suite_ddp" / "straggler", logdir / "ddp")
    for name in ("eager_bs32", "big_batch"):
        shutil.copytree(DATA / name, logdir / name)
    shutil.copytree(DATA / "suite" / MEM_RUN, logdir / MEM_RUN)
    # an out-of-memory capture beside it, written by the capture's own code from a simulated failure (no CUDA
    # here: no snapshot), its message carrying markup that the page must show as text
    error = torch.OutOfMemoryError(OOM_MESSAGE)
    assert OomCapture(logdir / MEM_RUN, "host_1").capture(error) is not None
    write_wide_job(logdir / "wide", WIDE_RANKS)
    cycle_loop(logdir / CYCLE_RUN, MANY_CYCLES)
    cache = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("cache"))  # the window tool writes there
    try:
        with TensorBoardWithoutProfilerTab(logdir, startup_timeout_s=120) as tb:
            try:
                yield tb, logdir
            finally:
                shutil.copy(tb.log_path, artifacts_dir() / "tab-tensorboard.log")
    finally:
        if cache is None:
            os.environ.pop("XDG_CACHE_HOME", None)
        else:
            os.environ["XDG_CACHE_HOME"] = cache


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, timeout=30_000)
        yield b
        b.close()


VIEWPORT = {"width": 1400, "height": 1000}


class Tab:
    """The page with the stepscope tab open, its iframe, and every request the page made.

    One page serves every test of the module: the first test loads TensorBoard's page and opens the tab
    through it; each later test loads the tab's own frame again, which starts the tab from nothing (it keeps
    no state outside its frame) without loading all of TensorBoard's page once more."""

    def __init__(self, page, requests: list[str]) -> None:
        self.page, self.requests = page, requests
        self.frame = None

    def open(self, base: str):
        if self.frame is None:
            self.page.goto(base + "/#stepscope")
            deadline = time.monotonic() + TIMEOUT_MS / 1e3
            while self.frame is None and time.monotonic() < deadline:
                self.frame = next((f for f in self.page.frames if "plugin_entry.html?name=stepscope" in f.url), None)
                self.page.wait_for_timeout(200)  # lets Playwright take in the page's events (a sleep would not)
            assert self.frame is not None, [f.url for f in self.page.frames]
        else:
            self.frame.goto(self.frame.url.split("#")[0])
        # every run analysed (the list asks again while one is pending, and then marks itself complete)
        # (the first test's page waits for every run's first analysis, seven runs on a shared 2-core machine)
        self.frame.wait_for_selector("#runs[data-complete='true'] table.runs", timeout=3 * TIMEOUT_MS)
        return self.frame

    def off_host(self) -> list[str]:
        return [u for u in self.requests if not LOOPBACK.match(u)]


@pytest.fixture(scope="module")
def shared_tab(browser, served):
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(TIMEOUT_MS)
    requests: list[str] = []
    page = context.new_page()
    page.on("request", lambda r: requests.append(r.url))
    try:
        yield Tab(page, requests)
    finally:
        context.close()


@pytest.fixture
def tab(shared_tab, request):
    t = shared_tab
    t.requests.clear()  # each test answers for the requests its own steps made
    try:
        yield t
    finally:
        name = SCREENSHOTS[request.node.name]
        t.page.screenshot(path=str(artifacts_dir() / f"tab-{name}.png"), full_page=True)
        t.page.set_viewport_size(VIEWPORT)  # as the next test expects it
    assert t.off_host() == [], f"requests left 127.0.0.1: {t.off_host()}"


def test_runs_list_shows_every_run_with_its_verdict(tab, served):
    tb, logdir = served
    frame = tab.open(tb.base)
    rows = frame.locator("tr.run")
    assert sorted(rows.evaluate_all("rs => rs.map(r => r.dataset.run)")) == sorted(
        [CPU_RUN, CYCLE_RUN, "big_batch", "ddp", "eager_bs32", MEM_RUN, "wide"])
    assert frame.locator("#runs p.muted").last.inner_text().endswith(f"under {logdir}")
    want = analyze(logdir / CPU_RUN).to_dict()
    row = frame.locator(f"tr.run[data-run='{CPU_RUN}']")
    assert row.locator(".badge").inner_text() == want["verdict"]
    assert row.locator("td.step").inner_text() == f"{want['spans'][0]['metrics']['step_ms']:.2f}"
    assert frame.locator("tr.run[data-run='eager_bs32'] td.busy").inner_text() == "26.3%"
    assert frame.locator(f"tr.run[data-run='{CPU_RUN}'] .spark").get_attribute("data-points") == str(CYCLES)
    assert frame.locator(f"tr.run[data-run='{CPU_RUN}'] .spark canvas").count() == 1
    assert any(u.endswith("/data/plugin/stepscope/static/vendor/uPlot.iife.min.js") for u in tab.requests)


def test_run_view_shows_the_verdict_card_bars_and_top_ops(tab, served):
    tb, logdir = served
    frame = tab.open(tb.base)
    frame.click(f"a.run-link[data-run='{CPU_RUN}']")
    frame.wait_for_selector("#verdict")
    want = analyze(logdir / CPU_RUN).to_dict()
    # the card shows the latest cycle (one trace each here) and names the run's verdict beside it: on a busy CPU
    # the two cycles of this short run need not agree
    assert frame.locator("#verdict .verdict-name").inner_text() == want["spans"][-1]["verdict"]
    assert f"the run: {want['verdict']}," in frame.locator("#verdict .verdict-line").inner_text()
    assert frame.locator("#step-unprofiled").inner_text() == f"{want['spans'][0]['metrics']['step_ms']:.2f} ms"
    profiled = want["spans"][-1]["metrics"]["profiled"]["step_ms"]  # the card shows the last cycle
    assert frame.locator("#step-profiled").inner_text() == f"{profiled:.2f} ms"
    assert frame.locator(".chart[data-kind='cycles']").get_attribute("data-bars") == str(CYCLES)
    assert frame.locator(".chart[data-kind='cycles'] canvas").count() == 1  # drawn by uPlot
    assert frame.locator("#top table.top").count() == 1  # the cycle shown, the latest: one process, one trace
    assert frame.locator("#top table.top").first.locator("tr").count() == 1 + len(want["spans"][-1]["top"])
    assert frame.locator("#verdict ul.remedies li").count() == len(want["spans"][-1]["remedies"])
    # each `snippet` of the cycle's remedies is shown as code (a stepscope flag such as `--device cuda`, or an API)
    snippets = [part for r in want["spans"][-1]["remedies"] for part in r.split("`")[1::2]]
    assert frame.locator("#verdict ul.remedies code").all_inner_texts() == snippets


def test_memory_view_draws_the_reports_figures(tab, served):
    tb, logdir = served
    frame = tab.open(tb.base)
    frame.click(f"a.run-link[data-run='{MEM_RUN}']")
    frame.wait_for_selector("#memory .mem-device")
    (span,) = analyze(logdir / MEM_RUN).to_dict()["spans"]
    (dev,) = span["memory"]["devices"]
    sec = frame.locator("#memory .mem-device")
    assert sec.count() == 1 and sec.get_attribute("data-device") == dev["device"] == "cuda:0"
    shown = lambda key: sec.locator(f"td[data-key='{key}']").inner_text()  # noqa: E731
    assert shown("peak-allocated") == f"{dev['peak_allocated_gib']:.3f} GiB"
    assert shown("peak-reserved") == f"{dev['peak_reserved_gib']:.3f} GiB"
    assert shown("capacity") == f"{dev['capacity_gib']:.3f} GiB"
    assert shown("headroom") == f"{dev['headroom_gib']:.3f} GiB ({dev['headroom_pct']:.1f}%)"
    assert shown("fragmentation").startswith(f"{dev['fragmentation_gib']:.3f} GiB ({dev['fragmentation_pct']:.1f}%")
    # the steps on the time view's axis (ProfilerStep#N), drawn by uPlot
    chart = sec.locator(".chart[data-kind='memory-steps']")
    assert chart.get_attribute("data-points") == str(len(dev["steps"])) and chart.locator("canvas").count() == 1
    peak = max(dev["steps"], key=lambda x: x["peak_allocated_gib"])
    assert f"step #{peak['step']}, in the {peak['peak_phase']}" in sec.inner_text()
    parts = sec.locator("table.mem-composition tr[data-part]")
    assert parts.evaluate_all("rs => rs.map(r => r.dataset.part)") == list(peak["composition_gib"])
    assert parts.evaluate_all("rs => rs.map(r => r.cells[1].textContent)") == [
        f"{x:.4f}" for x in peak["composition_gib"].values()]
    rows = sec.locator("table.mem-allocators tr")
    assert rows.count() == 1 + len(peak["top_allocators"]) > 1
    assert rows.nth(1).inner_text().split("\t") == [peak["top_allocators"][0]["name"],
                                                    f"{peak['top_allocators'][0]['gib']:.4f}"]
    # the trace has module frames (with_stack): the same bytes by module, and what no module allocated
    modules = sec.locator("table.mem-modules tr")
    assert modules.count() == 1 + len(peak["top_modules"]) + 1 > 2
    assert modules.nth(1).inner_text().split("\t") == [peak["top_modules"][0]["name"],
                                                       f"{peak['top_modules'][0]['gib']:.4f}"]
    assert modules.last.inner_text().split("\t") == ["(outside any module)", f"{peak['outside_modules_gib']:.4f}"]
    assert frame.locator("#memory .mem-findings li").evaluate_all("ls => ls.map(l => l.dataset.id)") == [
        f["id"] for f in span["memory"]["findings"]]
    assert frame.locator("#memory table.mem-creep tr[data-cycle]").count() == 1
    # the out-of-memory capture: its cause, and the message's markup shown as text, never as an element
    oom = frame.locator("#memory .oom")
    assert oom.count() == 1
    (capture,) = (logdir / MEM_RUN / "oom").glob("*/oom.json")
    diagnosis = json.loads(capture.read_text())["diagnosis"]
    assert f"out of memory (host_1): {diagnosis['cause']}" in oom.inner_text()
    assert f"live: {diagnosis['live']}" in oom.inner_text()
    assert "<img src=x onerror=alert(1)>" in oom.inner_text() and frame.locator("#memory img").count() == 0
    assert "allocator snapshot absent" in oom.inner_text()


def test_multi_rank_job_marks_the_straggler_and_says_why(tab, served):
    tb, _ = served
    frame = tab.open(tb.base)
    frame.click("a.run-link[data-run='ddp']")
    frame.wait_for_selector("li.straggler")
    chart = frame.locator(".chart[data-kind='ranks']")
    assert chart.get_attribute("data-bars") == "2" and chart.get_attribute("data-marked") == "1"
    straggler = frame.locator("li.straggler")
    assert straggler.count() == 1 and straggler.get_attribute("data-rank") == "1"
    assert "rank 1 straggles" in straggler.inner_text()
    assert "host work outside torch ops" in straggler.inner_text()  # the analysis's own stragglers_why
    tab.page.set_viewport_size({"width": 1400, "height": 1900})  # the whole job on one screenshot
    tab.page.wait_for_timeout(500)
    tab.page.screenshot(path=str(artifacts_dir() / "tab-ranks-full.png"))


def test_hundreds_of_ranks_are_a_sorted_distribution(tab, served):
    tb, _ = served
    frame = tab.open(tb.base)
    frame.click("a.run-link[data-run='wide']")
    frame.wait_for_selector("li.straggler")
    assert frame.locator(".chart[data-kind='ranks']").count() == 0
    chart = frame.locator(".chart[data-kind='distribution']")
    assert chart.get_attribute("data-points") == str(WIDE_RANKS) and chart.get_attribute("data-marked") == "1"
    assert frame.locator("li.straggler").get_attribute("data-rank") == str(WIDE_RANKS - 1)


def test_two_runs_side_by_side(tab, served):
    tb, _ = served
    frame = tab.open(tb.base)
    frame.check("input[data-run='eager_bs32']")
    frame.check("input[data-run='big_batch']")
    frame.click("#compare")
    frame.wait_for_selector("#diff-summary")
    summary = frame.locator("#diff-summary .verdict-line").inner_text()
    assert "big_batch" in summary and "eager_bs32" in summary and "CI" in summary
    assert frame.locator(".chart[data-kind='compare']").get_attribute("data-bars") == "2"
    assert frame.locator("#ops-changed tr").count() > 3
    assert frame.locator("table.sides .badge").all_inner_texts() == ["launch_bound", "gpu_bound"]


def test_window_of_steps_becomes_a_run_for_both_tabs(tab, served):
    """Under a plain TensorBoard the window is written to the user's cache (XDG_CACHE_HOME, set for the
    server by ``served``), never into the logdir; the page says where, and shows its summary and traces."""
    tb, logdir = served
    before = sorted(logdir.rglob("*"))
    frame = tab.open(tb.base)
    frame.click(f"a.run-link[data-run='{CPU_RUN}']")
    frame.wait_for_selector("#window")
    frame.fill("#steps", "3:6")
    started = time.monotonic()
    frame.click("#window-go")
    frame.wait_for_selector("#window-result .window-run")
    name = frame.locator("#window-result .window-run").inner_text()
    elapsed = time.monotonic() - started
    assert name == f"{CPU_RUN}.steps3-5" and elapsed < 30, (name, elapsed)
    folder = window_root(logdir) / name
    assert str(folder) in frame.locator("#window-result .window-folder").inner_text()
    assert sorted(logdir.rglob("*")) == before  # the logdir of a plain tensorboard is never written
    assert frame.locator("#open-profiler").get_attribute("href") == "/#pytorch_profiler"  # TensorBoard's page
    link = frame.locator("#window-result a.perfetto").first
    with tab.page.expect_download() as download:
        link.click()
    assert download.value.suggested_filename.endswith(".trace.json.gz")
    frame.click("#window-result a.run-link")
    frame.wait_for_selector("#verdict")
    report = analyze(folder).to_dict()
    assert "3 profiled steps analysed" in report["spans"][0]["evidence"][0]
    assert frame.locator("#verdict .verdict-name").inner_text() == report["verdict"]


def _plain(text: str) -> str:
    return text.replace("`", "")  # the tab shows `code` as code elements


def test_a_multi_cycle_run_shows_the_cycle_its_headline_names(tab, served):
    """Six cycles, the run's verdict cpu_bound (five of six), the last cycle's host_bound: the card shows the
    latest cycle by default, its headline, figures, evidence, remedies and operators all of that cycle; any
    cycle can be picked, and cycles are numbered from 0 as diagnosis.md numbers them."""
    tb, logdir = served
    frame = tab.open(tb.base)
    frame.click(f"a.run-link[data-run='{CYCLE_RUN}']")
    frame.wait_for_selector("#verdict")
    want = analyze(logdir / CYCLE_RUN).to_dict()
    spans = want["spans"]  # one process: span i is cycle i
    assert len(spans) == MANY_CYCLES and want["verdict"] == "cpu_bound" and spans[-1]["verdict"] == "host_bound"
    options = frame.locator("#cycle-pick option").evaluate_all("os => os.map(o => o.textContent)")
    assert options == [f"cycle {i}: {s['verdict']}" for i, s in enumerate(spans)]
    for i in (MANY_CYCLES - 1, 0, 3):
        if i != MANY_CYCLES - 1:
            frame.select_option("#cycle-pick", str(i))
        span = spans[i]
        assert frame.locator("#verdict").get_attribute("data-cycle") == str(i)
        assert frame.locator("#verdict .verdict-name").inner_text() == span["verdict"]
        assert frame.locator("#step-unprofiled").inner_text() == f"{span['metrics']['step_ms']:.2f} ms"
        evidence = frame.locator("#verdict ul.evidence li").evaluate_all("ls => ls.map(l => l.textContent)")
        assert evidence == [_plain(e) for e in span["evidence"]]
        remedies = frame.locator("#verdict ul.remedies li").evaluate_all("ls => ls.map(l => l.textContent)")
        assert remedies == [_plain(r) for r in span["remedies"]]
        assert frame.locator("#top table.top").count() == 1
        names = frame.locator("#top table.top td.name").evaluate_all("ts => ts.map(t => t.title)")
        assert names == [op["name"] for op in span["top"]]
    labels = frame.locator(".chart[data-kind='cycles']").get_attribute("data-bars")
    assert labels == str(MANY_CYCLES)



def test_the_tabs_figures_round_as_the_console_does(browser):
    """The tab writes its figures with index.js's ``fixed``, which gives Python's ``format(x, '.Nf')`` (the
    console's and the report's text), exact ties included: toFixed alone writes 80.63 for a step of exactly
    80.625 ms, which the console prints as 80.62. Here the function as index.js holds it, in Chromium."""
    source = (Path(__file__).resolve().parents[1] / "trainer" / "tensorboard" / "tab" / "static" / "index.js").read_text()
    found = re.search(r"^const fixed = \(x, d\) => \{$.*?^\};$", source, re.S | re.M)
    assert found, "index.js has no `const fixed = (x, d) => {...};`"
    cases = [(80.625, 2), (80.635, 2), (0.125, 2), (0.375, 2), (-0.125, 2), (-80.625, 2), (2.5, 0), (3.5, 0),
             (12.25, 1), (12.75, 1), (0.0625, 3), (0.1875, 3), (1.005, 2), (80.6251, 2), (3.0, 2), (1e20, 2),
             (123456.789, 1)]
    page = browser.new_page()
    try:
        got = page.evaluate(f"(cases) => {{\n{found.group(0)}\nreturn cases.map(([x, d]) => fixed(x, d));\n}}",
                            [list(c) for c in cases])
    finally:
        page.close()
    assert got == [f"{x:.{d}f}" for x, d in cases]
