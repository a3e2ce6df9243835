"""Headless Chromium against a real TensorBoard serving a real profiled training run.

    apt-get update && apt-get install -y chromium      # Debian's browser, at /usr/bin/chromium
    pytest -m browser tests/test_browser.py

Skips with the install command when /usr/bin/chromium or the `playwright` package is missing. Screenshots of
each test's final page (pass or fail) go to $STEPSCOPE_ARTIFACTS (default test-artifacts/, git-ignored):
browser-scalars.png, browser-time-series.png, browser-text.png (+ browser-text-diagnosis.png, the diagnosis
card alone), browser-profiler.png; and TensorBoard's log, browser-tensorboard.log.

Offline (as in CI), TensorBoard's own dashboards are bundled and work; the PyTorch Profiler tab's page
waits for Google Charts from gstatic before it draws, so that tab is checked up to its data API.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest
from browser_helpers import (
    ACTION_TIMEOUT_MS,
    CHROMIUM,
    INSTALL_HINT,
    artifacts_dir,
    displayed_number,
    launch_chromium,
    open_page,
    wait_for_response,
)
from stepscope.tensorboard.tbserver import TensorBoard
from stepscope.trace.files import find_plugin_traces
from trainrun import FAST, PROFILE_3_STEPS, run_json, run_train

pytestmark = [pytest.mark.slow,
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"no {CHROMIUM}; install it with: {INSTALL_HINT}"),
]
sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright: pip install -e '.[dev]'")
expect = sync_api.expect
expect.set_options(timeout=ACTION_TIMEOUT_MS)

RUN = "browser_run"
STEPS = 6  # --log-every 2: train/loss at steps 2, 4, 6; perf/step_ms at 4 and 6 (profiled steps excluded)
SCREENSHOTS = {
    "test_scalars_dashboard_draws_our_run_and_tags": "browser-scalars.png",
    "test_time_series_dashboard_shows_logged_values": "browser-time-series.png",
    "test_text_dashboard_shows_config_and_diagnosis": "browser-text.png",
    "test_profiler_tab_loads_and_reaches_its_api": "browser-profiler.png",
}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One profiled run, one TensorBoard for every test here."""
    logdir = tmp_path_factory.mktemp("browser") / "logs"
    r = run_train([*FAST, "--steps", str(STEPS), *PROFILE_3_STEPS, "--logdir", str(logdir), "--run-name", RUN],
                  timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = logdir / RUN
    with TensorBoard(logdir, startup_timeout_s=60) as tb:
        try:
            tb.wait_for_runs([RUN], timeout_s=60)
            yield tb, run_dir, run_json(run_dir)
        finally:
            shutil.copy(tb.log_path, artifacts_dir() / "browser-tensorboard.log")


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as pw:
        b = launch_chromium(pw)
        yield b
        b.close()


@pytest.fixture
def page(browser, request):
    """A page whose final state is saved as SCREENSHOTS[test], pass or fail."""
    context, pg, traffic = open_page(browser)
    yield pg, traffic
    try:
        pg.screenshot(path=str(artifacts_dir() / SCREENSHOTS[request.node.name]), timeout=10_000)
    finally:
        context.close()


def test_scalars_dashboard_draws_our_run_and_tags(served, page):
    tb, run_dir, record = served
    pg, traffic = page
    tags = ["train/loss", "train/lr", "perf/step_ms"]
    with wait_for_response(pg, "/data/plugin/scalars/tags"):
        pg.goto(f"{tb.base}/#scalars")
    expect(pg.locator("tf-runs-selector").get_by_text(RUN, exact=True)).to_be_visible()
    pg.locator("tf-tag-filterer input").fill("^(" + "|".join(tags) + ")$")
    # With 2-3 points a series, outlier trimming collapses the y-domain to [0, 1] and hides every line.
    pg.get_by_role("checkbox", name="Ignore outliers in chart scaling").uncheck()
    for tag in tags:
        card = pg.locator("tf-scalar-card").filter(has_text=tag)
        expect(card).to_have_count(1)
        expect(card).to_be_visible()
        # a drawn series is an SVG path whose geometry starts with a move-to
        expect(card.locator("path.line").first).to_have_attribute("d", re.compile(r"^M"))

    fetched = {}
    for r in traffic.matching("/data/plugin/scalars/scalars_multirun"):
        body = r.request.post_data or ""
        for tag in tags:
            if f'name="tag"\r\n\r\n{tag}\r\n' in body:
                assert r.status == 200, (tag, r.status)
                fetched[tag] = r.json()[RUN]
    assert set(fetched) == set(tags), f"the dashboard fetched {sorted(fetched)}"
    assert [[step, value] for _, step, value in fetched["train/loss"]] == record["loss_history"]
    assert [step for _, step, _ in fetched["perf/step_ms"]] == [4, 6]


def test_time_series_dashboard_shows_logged_values(served, page):
    tb, run_dir, record = served
    pg, traffic = page
    last_step, last_loss = record["loss_history"][-1]
    pg.goto(f"{tb.base}/#timeseries")
    pg.locator('input[placeholder="Filter tags (regex)"]').fill("^(train/loss|perf/step_ms)$")
    pg.keyboard.press("Escape")  # close the tag autocomplete, which covers the cards in the screenshot
    card = pg.locator("card-view:visible").filter(has_text="train/loss")
    expect(card).to_have_count(1)
    # the data table under the chart shows our run's value at the last step
    row = card.locator("tb-data-table-content-row").filter(has_text=RUN)
    expect(row).to_have_count(1)
    headers = [h.strip() for h in card.locator("tb-data-table-header-cell").all_inner_texts()]
    cells = row.locator("tb-data-table-content-cell")
    expect(cells.nth(headers.index("Value"))).to_have_text(displayed_number(last_loss))
    expect(cells.nth(headers.index("Step"))).to_have_text(str(last_step))
    expect(pg.locator("card-view:visible").filter(has_text="perf/step_ms")).to_have_count(1)


def test_text_dashboard_shows_config_and_diagnosis(served, page):
    tb, run_dir, record = served
    pg, traffic = page
    verdict = record["diagnosis"]["verdict"]
    pg.goto(f"{tb.base}/#text")
    # one Text tag each, as written (no "/text_summary"): the config, and the diagnosis of each profiling cycle
    # and of the whole run at its end
    config = pg.locator("tf-text-loader").filter(has_text='"run_name"')
    diagnosis = pg.locator("tf-text-loader").filter(has_text="stepscope diagnosis")
    expect(config).to_contain_text(f'"run_name": "{RUN}"')
    expect(config).to_contain_text(f'"steps": {STEPS}')
    # the markdown rendered as HTML: a heading with the verdict, then the evidence tables
    expect(diagnosis.locator("h1").filter(has_text=f"stepscope diagnosis: {verdict}").first).to_be_visible()
    expect(diagnosis).to_contain_text("verdict")
    expect(diagnosis.locator("table").first).to_be_visible()
    assert verdict in (run_dir / "diagnosis.md").read_text()
    texts = {r.url.split("tag=", 1)[-1]: r.status for r in traffic.matching("/data/plugin/text/text")}
    assert texts == {"config": 200, "diagnosis": 200}, texts
    diagnosis.scroll_into_view_if_needed()
    diagnosis.screenshot(path=str(artifacts_dir() / "browser-text-diagnosis.png"), timeout=10_000)


def test_profiler_tab_loads_and_reaches_its_api(served, page):
    tb, run_dir, record = served
    pg, traffic = page
    (trace,) = find_plugin_traces(run_dir)
    with wait_for_response(pg, "/data/plugin/pytorch_profiler/spans"):
        pg.goto(f"{tb.base}/#pytorch_profiler")
    expect(pg.locator('iframe[src*="plugin_entry.html?name=pytorch_profiler"]')).to_be_attached()
    (app,) = [f for f in pg.frames if f.url.endswith("/data/plugin/pytorch_profiler/index.html")]
    for shown in ("Runs", RUN, "Views", "Overview", "Workers", trace.worker):
        expect(app.get_by_text(shown, exact=True).first).to_be_visible()

    for route in ("runs", "views", "workers", "spans"):
        assert traffic.one(f"/data/plugin/pytorch_profiler/{route}").status == 200, route
    runs = traffic.one("/data/plugin/pytorch_profiler/runs").json()
    assert RUN in runs["runs"] and runs["loading"] is False
    assert {"Overview", "Operator", "Trace"} <= set(traffic.one("/data/plugin/pytorch_profiler/views").json())
    assert traffic.one("/data/plugin/pytorch_profiler/workers").json() == [trace.worker]
    spans = traffic.one("/data/plugin/pytorch_profiler/spans").json()
    assert len(spans) == 1
    # offline, the charts library cannot load, and the page stops here; its own API still answers from it
    assert any("gstatic.com/charts" in url for url in traffic.blocked), traffic.blocked
    status, overview = app.evaluate(
        """async ([run, worker, span]) => {
             const q = new URLSearchParams({run, worker, span});
             const r = await fetch(`overview?${q}`, {signal: AbortSignal.timeout(20000)});
             return [r.status, await r.json()];
           }""",
        [RUN, trace.worker, spans[0]])
    assert status == 200
    assert len(overview["steps"]["rows"]) == 2, json.dumps(overview)[:2000]  # --active 2
