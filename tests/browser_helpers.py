"""Headless Chromium (Debian's `chromium`) driven by Playwright against a loopback TensorBoard, for tests.

Used by the browser tests (tests/test_*browser.py). The browser is the system one at CHROMIUM; `playwright
install` (which downloads browsers) is never needed. Every request that leaves 127.0.0.1 is aborted and recorded, so the
page behaves the same with or without internet and never waits on a remote host.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
from dataclasses import dataclass, field
from pathlib import Path

from stepscope.tensorboard.tbserver import TensorBoard, loopback_get

CHROMIUM = Path("/usr/bin/chromium")
INSTALL_HINT = "apt-get update && apt-get install -y chromium"
REPO = Path(__file__).resolve().parents[1]
VIEWPORT = {"width": 1400, "height": 1000}
ACTION_TIMEOUT_MS = 20_000  # one UI wait (a card appears, a field fills); TensorBoard answers in < 3 s here
NAVIGATION_TIMEOUT_MS = 30_000
LAUNCH_TIMEOUT_MS = 30_000
# anything that is not our loopback TensorBoard, e.g. https://www.gstatic.com/charts/loader.js
OFF_HOST = re.compile(r"^(?!https?://127\.0\.0\.1[:/])[a-z]+://")


def artifacts_dir() -> Path:
    """Where screenshots go: $STEPSCOPE_ARTIFACTS, else test-artifacts/ in the repo root (git-ignored)."""
    d = Path(os.environ.get("STEPSCOPE_ARTIFACTS") or REPO / "test-artifacts")
    d.mkdir(parents=True, exist_ok=True)
    return d


def launch_chromium(playwright):
    return playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, timeout=LAUNCH_TIMEOUT_MS)


@dataclass
class Traffic:
    """What the page asked for: every response (all frames, iframes included) and every blocked request."""

    responses: list = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)

    def matching(self, path: str) -> list:
        """Responses whose URL path ends with ``path`` (query string ignored)."""
        return [r for r in self.responses if r.url.split("?", 1)[0].endswith(path)]

    def one(self, path: str):
        found = self.matching(path)
        assert found, f"the page never requested {path}; it asked for {[r.url for r in self.responses]}"
        return found[-1]


def open_page(browser):
    """A fresh context and page with bounded timeouts, internet blocked, and its traffic recorded."""
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(ACTION_TIMEOUT_MS)
    context.set_default_navigation_timeout(NAVIGATION_TIMEOUT_MS)
    traffic = Traffic()

    def block(route) -> None:
        traffic.blocked.append(route.request.url)
        route.abort("internetdisconnected")

    context.route(OFF_HOST, block)
    def record(response) -> None:
        traffic.responses.append(response)

    page = context.new_page()
    page.on("response", record)
    return context, page, traffic


def wait_for_response(page, path: str, timeout_ms: int = NAVIGATION_TIMEOUT_MS):
    """A context manager that waits for the page's next response whose URL path ends with ``path``."""
    return page.expect_response(lambda r: r.url.split("?", 1)[0].endswith(path), timeout=timeout_ms)


def displayed_number(value: float) -> str:
    """How TensorBoard's Time Series data table prints a scalar: 1,591.5875, 2.1827, 0.5, 6."""
    return f"{value:,.4f}".rstrip("0").rstrip(".")


# TensorBoard's own main with every plugin it finds through the tensorboard_plugins entry point (stepscope's tab
# among them) but torch-tb-profiler's, for tests that never open the PyTorch Profiler tab: that plugin parses
# every trace of the logdir at start, each in a process of its own. Its tab is tested with the stepscope tab
# beside it in test_profiler_tab_browser.py.
WITHOUT_PROFILER_TAB = """
from absl import app
from tensorboard import default, main_lib, program
plugins = [p for p in default.get_plugins() if not p.__module__.startswith("torch_tb_profiler")]
main_lib.global_init()
tb = program.TensorBoard(plugins=plugins)
app.run(tb.main, flags_parser=tb.configure)
"""


class TensorBoardWithoutProfilerTab(TensorBoard):
    """stepscope.tensorboard.tbserver.TensorBoard, started through WITHOUT_PROFILER_TAB."""

    def __enter__(self) -> TensorBoard:
        self._log_dir = tempfile.mkdtemp(prefix="stepscope-tensorboard-")
        self.log_path = Path(self._log_dir) / f"tensorboard-{self.port}.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen([sys.executable, "-c", WITHOUT_PROFILER_TAB, "--logdir", str(self.logdir),
                                      "--host", "127.0.0.1", "--port", str(self.port), "--load_fast=false",
                                      "--reload_interval", "2"], stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                text = self.log_text()  # read before __exit__ removes the log
                self.__exit__(None, None, None)
                raise RuntimeError(f"tensorboard exited with {self.proc.returncode}: {text}")
            try:
                listing = json.loads(loopback_get(self.base + "/data/plugins_listing", timeout_s=5.0))
            except (urllib.error.URLError, OSError):  # not listening yet, or busy starting
                time.sleep(0.5)
                continue
            assert "stepscope" in listing and "pytorch_profiler" not in listing, list(listing)
            return self
        text = self.log_text()
        self.__exit__(None, None, None)
        raise TimeoutError(f"tensorboard did not answer within {self.startup_timeout_s}s: {text}")
