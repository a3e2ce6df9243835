"""Make docs/tab.png from this checkout: the stepscope tab on tests/data/suite_ddp/straggler, in headless Chromium.

    python scripts/tab_screenshot.py                 # writes docs/tab.png and docs/tab.png.json
    python scripts/tab_screenshot.py --out /tmp/tab.png

A real TensorBoard on 127.0.0.1 serves a copy of the 2-rank straggler job (the plugin found through its entry
point); Debian's chromium at /usr/bin/chromium, driven by Playwright, opens the tab, the run, and waits for the
ranks section. Beside the picture, ``<out>.json`` records what the page showed (the verdict, the step without
and with the profiler, the stragglers), so that a test (tests/test_docs_match.py) holds the picture's figures to
what the analysis prints today: when they part, run this again.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright
from stepscope.tensorboard.tbserver import TensorBoard

REPO = Path(__file__).resolve().parents[1]
JOB = REPO / "tests" / "data" / "suite_ddp" / "straggler"
RUN = "ddp_job"
CHROMIUM = Path("/usr/bin/chromium")
TIMEOUT_MS = 180_000


def shoot(out: Path) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        logdir = Path(tmp) / "logs"
        shutil.copytree(JOB, logdir / RUN)
        with TensorBoard(logdir, startup_timeout_s=120) as tb, sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--headless", "--no-sandbox"])
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(TIMEOUT_MS)
            page.route("**/*", lambda r: r.continue_() if r.request.url.startswith(tb.base) else r.abort())
            page.goto(tb.base + "/#stepscope")
            frame = None
            while frame is None:
                page.wait_for_timeout(200)
                frame = next((f for f in page.frames if "plugin_entry.html?name=stepscope" in f.url), None)
            frame.wait_for_selector("#runs[data-complete='true'] table.runs")
            frame.click(f"a.run-link[data-run='{RUN}']")
            frame.wait_for_selector("#verdict")
            frame.wait_for_selector("#ranks .job")
            shown = {"run": str(JOB.relative_to(REPO)),
                     "verdict": frame.locator("#verdict .verdict-name").inner_text(),
                     "step_unprofiled": frame.locator("#step-unprofiled").inner_text(),
                     "step_profiled": frame.locator("#step-profiled").inner_text(),
                     "ranks_title": frame.locator("#ranks .job h3").first.inner_text()}
            page.screenshot(path=str(out), full_page=False)
            browser.close()
    out.with_name(out.name + ".json").write_text(json.dumps(shown, indent=1) + "\n")
    return shown


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "tab.png")
    a = ap.parse_args()
    if not CHROMIUM.exists():
        print(f"tab_screenshot.py: error: no {CHROMIUM} (apt-get install -y chromium)", file=sys.stderr)
        return 2
    print(json.dumps(shoot(a.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
