"""Headless Chromium (Debian's `chromium`) driven by Playwright against a loopback TensorBoard, for tests.

Used by tests/test_browser.py. The browser is the system one at CHROMIUM; `playwright install` (which
downloads browsers) is never needed. Every request that leaves 127.0.0.1 is aborted and recorded, so the
page behaves the same with or without internet and never waits on a remote host.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

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
