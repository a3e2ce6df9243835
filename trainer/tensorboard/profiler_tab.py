"""TensorBoard whose PyTorch Profiler tab draws without the internet: what `stepscope tensorboard` runs.

    python -m stepscope.tensorboard.profiler_tab --logdir DIR --port 6006    # flags as `tensorboard`

torch-tb-profiler 0.4.3's page (static/index.html) loads Google Charts from www.gstatic.com and waits for
it before it draws any view, and its Trace view's page (static/trace_embedding.html) loads the HTML Imports
polyfill from cdnjs. Offline, every view spins forever. Google's terms forbid hosting a copy of Google
Charts, so this TensorBoard registers `OfflineProfilerPlugin` in place of the plugin's own class: the same
plugin (same name, same routes, same data), whose two pages are served with those two addresses pointing at
files served here under /data/plugin/pytorch_profiler/offline/:

    gcharts.js              the part of google.charts / google.visualization the bundle calls, drawn with
                            Apache ECharts (vendor/echarts.min.js); Table is a plain HTML table
    guard.js                inlined first into the page: a script error, a failed API request or a chart
                            that cannot draw is said in words on the page instead of an endless spinner
    webcomponents.min.js    the polyfill, vendored unmodified (vendor/README)

The installed torch_tb_profiler is only read: nothing is written to its files and nothing in it is replaced
at import time. A plain `tensorboard --logdir DIR` still gets the plugin's own page (docs/tensorboard.md).
"""

from __future__ import annotations

import gzip
import mimetypes
import sys
import zlib
from pathlib import Path

from tensorboard.plugins import base_plugin
from torch_tb_profiler.plugin import TorchProfilerPlugin
from werkzeug import wrappers

CHARTS = Path(__file__).resolve().parent / "charts"
# name served under offline/ -> file under CHARTS
ASSETS = {"gcharts.js": "gcharts.js", "echarts.min.js": "vendor/echarts.min.js",
          "webcomponents.min.js": "vendor/webcomponents.min.js"}
GOOGLE_LOADER = '<script src="https://www.gstatic.com/charts/loader.js"></script>'
POLYFILL = "https://cdnjs.cloudflare.com/ajax/libs/webcomponentsjs/0.7.24/webcomponents.min.js"
NOSNIFF = {"X-Content-Type-Options": "nosniff"}


def offline_page(html: str, guard_js: str) -> str:
    """The plugin's index.html with the guard first in <head> and Google's loader replaced by the stand-in.

    A page without the loader (another plugin version) still gets both: the stand-in defines `google` for
    the bundle, and the guard says in words whatever then fails."""
    local = '<script src="offline/echarts.min.js"></script><script src="offline/gcharts.js"></script>'
    if GOOGLE_LOADER in html:
        html = html.replace(GOOGLE_LOADER, local, 1)
    else:
        html = html.replace("<head>", "<head>" + local, 1)
    return html.replace("<head>", f"<head><script>{guard_js}</script>", 1)


def offline_trace_page(html: str) -> str:
    """The Trace view's frame with the HTML Imports polyfill served from here."""
    return html.replace(POLYFILL, "offline/webcomponents.min.js")


class OfflineProfilerPlugin(TorchProfilerPlugin):
    """torch-tb-profiler's plugin, whose pages load nothing from another host."""

    def __init__(self, context: base_plugin.TBContext) -> None:
        super().__init__(context)
        static = Path(sys.modules[TorchProfilerPlugin.__module__].__file__).resolve().parent / "static"
        guard = (CHARTS / "guard.js").read_text()
        self._pages = {"index.html": offline_page((static / "index.html").read_text(encoding="utf-8"), guard),
                       "trace_embedding.html": offline_trace_page(
                           (static / "trace_embedding.html").read_text(encoding="utf-8"))}

    def get_plugin_apps(self) -> dict:
        apps = super().get_plugin_apps()
        apps["/index.html"] = self._page
        apps["/trace_embedding.html"] = self._page
        apps["/offline/*"] = self._asset
        apps["/trace"] = self._trace
        return apps

    def _trace(self, environ, start_response):
        """The plugin's /trace, sent as one gzip member.

        For a run without GPU kernels the plugin sends the .gz file as it is, as `Content-Encoding: gzip`;
        browsers decode only the first member of such a body, and stepscope's adapted copies are written in
        several (plugin_copy/stream_write.py), so the page read a truncated trace and the Trace view never drew."""
        answer: dict = {}

        def keep(status, headers, exc_info=None):
            answer.update(status=status, headers=headers)
            return lambda _data: None

        body = b"".join(self.trace_route(environ, keep))
        headers = [(k, v) for k, v in answer["headers"] if k.lower() != "content-length"]
        if answer["status"].startswith("200") and ("Content-Encoding", "gzip") in headers:
            first = zlib.decompressobj(16 + zlib.MAX_WBITS)
            first.decompress(body)
            if first.unused_data:
                body = gzip.compress(gzip.decompress(body), 1)
        start_response(answer["status"], [*headers, ("Content-Length", str(len(body)))])
        return [body]

    @wrappers.Request.application
    def _page(self, request):
        body = self._pages[request.path.rsplit("/", 1)[-1]]
        return wrappers.Response(body.encode("utf-8"), content_type="text/html; charset=utf-8", headers=NOSNIFF)

    @wrappers.Request.application
    def _asset(self, request):
        name = request.path.split("/offline/", 1)[-1]
        if name not in ASSETS:
            return wrappers.Response(f"no file {name!r} here", status=404, content_type="text/plain",
                                     headers=NOSNIFF)
        kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
        return wrappers.Response((CHARTS / ASSETS[name]).read_bytes(), content_type=kind,
                                 headers={"Cache-Control": "max-age=3600", **NOSNIFF})


def plugins() -> list:
    """TensorBoard's plugins as `tensorboard` loads them, with the profiler's class replaced by ours."""
    from tensorboard import default

    return [OfflineProfilerPlugin if p is TorchProfilerPlugin else p for p in default.get_plugins()]


def main() -> None:
    """`tensorboard`'s own main (tensorboard/main.py), with plugins()."""
    from absl import app
    from tensorboard import main_lib, program

    main_lib.global_init()
    tb = program.TensorBoard(plugins=plugins())
    try:
        app.run(tb.main, flags_parser=tb.configure)
    except base_plugin.FlagsError as e:
        print(f"Error: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
