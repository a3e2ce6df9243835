"""Hostile names in a trace reach no browser as HTML: TensorBoard's Text tab and the stepscope tab, opened in
headless Chromium (Debian's `chromium`, through Playwright) on a run whose top operator is renamed
``aten::conv<img src="http://203.0.113.7/beacon.png">...`` and whose worker file is named
``w<img src=x onerror=alert(1)>.<span>.<span>.pt.trace.json.gz``.

    pytest -m browser tests/test_hostile_browser.py

The run is published the way `stepscope tensorboard` publishes it (its diagnosis as Text, the adapted trace
for the tabs) and served by a real TensorBoard on 127.0.0.1 (without torch-tb-profiler's tab, which these
tests do not open). Every request that would leave the host is blocked and counted (browser_helpers.open_page),
every request is recorded, and dialogs are counted: the pages must make no request off the host, none for the injected ``src=x``, open no dialog, and hold no
injected element, while showing the hostile names as text.
"""

from __future__ import annotations

import pytest
from browser_helpers import (
    CHROMIUM,
    INSTALL_HINT,
    TensorBoardWithoutProfilerTab,
    artifacts_dir,
    launch_chromium,
    open_page,
)
from test_hostile_names import HOSTILE_OP, HOSTILE_WORKER, published, write_hostile_run

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not CHROMIUM.exists(), reason=f"no {CHROMIUM}; install it with: {INSTALL_HINT}")]
sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright: pip install -e '.[dev]'")

RUN = "run1"
TIMEOUT_MS = 60_000
# every element the hostile names could have injected, searched through shadow roots too
INJECTED = """() => {
  const found = [];
  const walk = (root) => {
    for (const el of root.querySelectorAll('*')) {
      const src = el.getAttribute('src') || '';
      if (el.hasAttribute('onerror') || (el.tagName === 'IMG' && (src === 'x' || src.includes('203.0.113.7')))) {
        found.push(el.outerHTML.slice(0, 200));
      }
      if (el.shadowRoot) walk(el.shadowRoot);
    }
  };
  walk(document);
  return found;
}"""
DEEP_TEXT = """() => {
  const parts = [];
  const walk = (root) => {
    for (const el of root.querySelectorAll('*')) {
      if (el.shadowRoot) walk(el.shadowRoot);
    }
    if (root.body) parts.push(root.body.innerText);
    else if (root.host) parts.push(Array.from(root.children).map((c) => c.innerText || '').join('\\n'));
  };
  walk(document);
  return parts.join('\\n');
}"""


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    write_hostile_run(tmp / "src" / RUN)
    (run,) = published(tmp / "src", tmp)
    assert run.name == RUN
    with TensorBoardWithoutProfilerTab(run.parent, startup_timeout_s=120) as tb:
        yield tb


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as pw:
        b = launch_chromium(pw)
        yield b
        b.close()


@pytest.fixture(scope="module")
def shared_page(browser):
    """One page for the module: the first test loads TensorBoard's page, the second only switches its tab."""
    context, pg, traffic = open_page(browser)
    context.set_default_timeout(TIMEOUT_MS)
    requests: list[str] = []
    dialogs: list[str] = []
    pg.on("request", lambda r: requests.append(r.url))
    pg.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    try:
        yield pg, traffic, requests, dialogs
    finally:
        context.close()


@pytest.fixture
def page(shared_page, request):
    pg, traffic, requests, dialogs = shared_page
    for seen in (traffic.blocked, requests, dialogs):
        seen.clear()  # each test answers for what its own steps did
    yield shared_page
    pg.screenshot(path=str(artifacts_dir() / f"hostile-{request.node.name}.png"), timeout=10_000)
    assert traffic.blocked == [], f"requests off the host: {traffic.blocked}"
    assert not [u for u in requests if u.endswith("/x") or "203.0.113.7" in u], requests
    assert dialogs == []


def test_text_tab_shows_hostile_names_as_text(served, page):
    pg, traffic, requests, dialogs = page
    pg.goto(f"{served.base}/#text")
    diagnosis = pg.locator("tf-text-loader").filter(has_text="diagnosis")
    sync_api.expect(diagnosis.locator("h1").first).to_contain_text("stepscope diagnosis", timeout=TIMEOUT_MS)
    sync_api.expect(diagnosis).to_contain_text(HOSTILE_OP.split("!")[0], timeout=TIMEOUT_MS)  # shown, as text
    sync_api.expect(diagnosis).to_contain_text(HOSTILE_WORKER)
    pg.wait_for_timeout(1000)  # time for an injected image to be fetched, were there one
    assert pg.evaluate(INJECTED) == []


def test_stepscope_tab_shows_hostile_names_as_text(served, page):
    pg, traffic, requests, dialogs = page
    pg.goto(f"{served.base}/#stepscope")
    pg.wait_for_selector("iframe")
    frame = None
    for _ in range(300):
        frame = next((f for f in pg.frames if "plugin_entry.html?name=stepscope" in f.url), None)
        if frame is not None:
            break
        pg.wait_for_timeout(200)
    assert frame is not None, [f.url for f in pg.frames]
    frame.click(f"a.run-link[data-run='{RUN}']", timeout=TIMEOUT_MS)
    frame.wait_for_selector("#verdict", timeout=TIMEOUT_MS)
    frame.wait_for_selector("#top table.top", timeout=TIMEOUT_MS)
    text = frame.evaluate("() => document.body.innerText")
    assert HOSTILE_OP in text and HOSTILE_WORKER in text, text[:3000]
    pg.wait_for_timeout(1000)
    assert frame.evaluate(INJECTED) == [] and pg.evaluate(INJECTED) == []
