"""The TensorBoard plugin "stepscope": JSON routes over each run's analysis, and the static frontend.

Registered through the ``tensorboard_plugins`` entry point (pyproject.toml), so a plain
``tensorboard --logdir logs`` shows the tab. Routes, under /data/plugin/stepscope/:

    runs                   every run: name, state (ready | analysing | error), verdict, unprofiled step ms,
                           GPU busy %, and the trend over its profiling cycles
    run?run=NAME           the whole report (views.run_view), with the run's verification when it has one and
                           its memory per cycle and step, with the out-of-memory captures under its oom/ folder
    ranks?run=NAME         each multi-rank cycle: per-rank breakdown, the stragglers and why
    diff?a=NAME&b=NAME     two runs compared (report/diff.py; what `stepscope diff` prints)
    vocabulary             the buckets', phases' and findings' labels and colours, and each verdict's tone
                           (analysis/vocabulary.py, analysis/verdicts.py): the page holds no copy of them
    window?run=NAME&steps=A:B   POST only, with the header X-Stepscope-Token: writes ProfilerStep#A..#B-1 of
                           NAME as its own run (window.py), and answers where
    trace?run=NAME&i=K     the K-th trace file of a run, as it is on disk (to open in Perfetto)
    index.js, static/...   the frontend

No GET writes into a plain `tensorboard`'s logdir: each run's analysis is kept in ``analysis_root(logdir)``,
a folder of the user's cache ($XDG_CACHE_HOME or ~/.cache, then stepscope/analysis/<hash of the logdir>),
and beside the run only under `stepscope tensorboard` (cache.py). The window route is the only one that
writes a run. A GET never does (405): any web page the user opens can make
the browser fire a GET at a loopback address. A POST must carry the token this process made at start, which
only the tab's own page holds (it is written into index.js as served; other origins cannot read that, and the
custom header alone makes a cross-origin browser request need a preflight TensorBoard never grants): 403
without it. The window is written into the logdir only under `stepscope tensorboard`, whose logdir is its
own shadow copy (WINDOWS_HERE names it in TensorBoard's environment). Under a plain `tensorboard` the user's
logdir is never written: windows go to ``window_root(logdir)``, a folder of the user's cache
($XDG_CACHE_HOME or ~/.cache, then stepscope/windows/<hash of the logdir>); the answer names the folder,
and the tab still shows the window's summary and its traces for Perfetto.

A run is a run folder, or the run folders that `stepscope analyze` makes one job of (the ranks of a job
written into sibling folders, report/jobs.py), named by their names joined with "+": the folders that may
be one job (runs.py) are analysed together, and listed as the jobs that analysis found (``listing``).
A run that is not analysed yet answers {"state": "analysing"} at once and is analysed in the background
(cache.py); the page asks again. Bad input answers 400 with {"error": "<one line>"}.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import mimetypes
import os
import secrets
from pathlib import Path

from stepscope.analysis.verdicts import REGISTRY
from stepscope.analysis.vocabulary import for_tab
from stepscope.report.diff import compare_runs
from stepscope.report.measure import RUN_RECORD
from stepscope.tensorboard.shadow_root import WINDOWS_HERE, source_of
from stepscope.tensorboard.tab.cache import AnalysisCache, Failed, Pending, Ready
from stepscope.tensorboard.tab.runs import Run, find_runs, joined, may_join
from stepscope.tensorboard.tab.views import ranks_view, run_row, run_view
from stepscope.tensorboard.tab.window import WindowError, write_window
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

PLUGIN_NAME = "stepscope"
STATIC = Path(__file__).resolve().parent / "static"
STATIC_FILES = {"index.js", "vendor/uPlot.iife.min.js", "vendor/uPlot.min.css", "vendor/LICENSE", "vendor/README"}
NOSNIFF = {"X-Content-Type-Options": "nosniff"}
WAIT_S = 2.0  # a route waits this long for a run's analysis before it answers "analysing"
TOKEN_HEADER = "X-Stepscope-Token"
TOKEN_SLOT = b"%STEPSCOPE_TOKEN%"  # in index.js, replaced by the token as it is served


def in_shadow(logdir: Path) -> bool:
    """Whether ``logdir`` is the shadow logdir of the `stepscope tensorboard` that started this TensorBoard
    (its own copy, which the tab may write), not a user's logdir (never written)."""
    here = os.environ.get(WINDOWS_HERE)
    return bool(here) and Path(here).resolve() == Path(logdir).resolve()


def user_cache(kind: str, logdir: Path) -> Path:
    """A folder of the user's cache for ``logdir``: $XDG_CACHE_HOME (or ~/.cache)/stepscope/KIND/<hash>."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "stepscope" / kind / hashlib.sha256(str(Path(logdir).resolve()).encode()).hexdigest()[:16]


def window_root(logdir: Path) -> Path:
    """Where the window route writes for ``logdir``: the logdir itself under `stepscope tensorboard`, else a
    folder of the user's cache (module docstring)."""
    return Path(logdir).resolve() if in_shadow(logdir) else user_cache("windows", logdir)


def analysis_root(logdir: Path) -> Path | None:
    """Where each run's analysis is kept (cache.py): beside the run (None) under `stepscope tensorboard`,
    else a folder of the user's cache, so that a GET never writes into a user's logdir."""
    return None if in_shadow(logdir) else user_cache("analysis", logdir)


def _json(body, code: int = 200) -> wrappers.Response:
    return wrappers.Response(json.dumps(body, allow_nan=False), status=code, content_type="application/json",
                             headers={"Cache-Control": "no-cache", **NOSNIFF})


def _error(message: str, code: int = 400) -> wrappers.Response:
    return _json({"error": message}, code)


def vocabulary() -> dict:
    """What the page names and colours, from the registries: analysis/vocabulary.py's buckets, phases and
    findings, and each verdict's tone (its badge's colour)."""
    return {**for_tab(), "verdicts": {v.name: {"tone": v.tone} for v in REGISTRY}}


def verification_of(run: Run) -> dict | None:
    """``stepscope verify``'s result, kept in the run's run.json; None when the run has none (a run of
    several folders has no run.json of its own)."""
    if run.folders:
        return None
    try:
        v = json.loads((run.folder / RUN_RECORD).read_text()).get("verification")
    except (OSError, ValueError, AttributeError):
        return None
    return v if isinstance(v, dict) else None


def parse_steps(text: str) -> tuple[int, int]:
    """"A:B" -> (A, B), the steps ProfilerStep#A .. #B-1 (as `stepscope analyze --steps`)."""
    lo, sep, hi = (text or "").partition(":")
    if not sep or not lo.strip().isdigit() or not hi.strip().isdigit() or int(hi) <= int(lo):
        raise ValueError(f"steps {text!r}: use A:B, whole numbers with B > A (ProfilerStep#A .. #B-1)")
    return int(lo), int(hi)


class StepscopePlugin(base_plugin.TBPlugin):
    plugin_name = PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext) -> None:
        self.logdir = Path(context.logdir or ".")
        self.windows = window_root(self.logdir)
        self.token = secrets.token_urlsafe(32)
        self.cache = AnalysisCache(analysis_root(self.logdir))

    def is_active(self) -> bool:
        return bool(find_runs(self.logdir))

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="stepscope", disable_reload=False)

    def get_plugin_apps(self) -> dict:
        return {"/index.js": self._index, "/static/*": self._static, "/runs": self._runs, "/run": self._run,
                "/ranks": self._ranks, "/diff": self._diff, "/window": self._window, "/trace": self._trace,
                "/vocabulary": self._vocabulary}

    @wrappers.Request.application
    def _index(self, request):
        script = (STATIC / "index.js").read_bytes().replace(TOKEN_SLOT, self.token.encode(), 1)
        return wrappers.Response(script, content_type="text/javascript", headers={"Cache-Control": "no-store",
                                                                                    **NOSNIFF})

    @wrappers.Request.application
    def _vocabulary(self, request):
        return _json(vocabulary())

    @wrappers.Request.application
    def _static(self, request):
        name = request.path.split("/static/", 1)[-1]
        if name not in STATIC_FILES:
            return _error(f"no static file {name!r}", 404)
        kind = mimetypes.guess_type(name)[0] or "text/plain"
        return wrappers.Response((STATIC / name).read_bytes(), content_type=kind,
                                 headers={"Cache-Control": "max-age=3600", **NOSNIFF})

    def listing(self, logdir: Path) -> dict[str, tuple[Run, Run]]:
        """Each run under ``logdir`` by name, with the run whose analysis gives its state: itself; or, for
        run folders that may be one job while they are analysed together, that analysis (module docstring)."""
        runs = find_runs(logdir)
        together = [run for run in runs.values() if may_join(run)]
        if len(together) < 2:
            return {name: (run, run) for name, run in runs.items()}
        shown = {name: (run, run) for name, run in runs.items() if run not in together}
        union = joined(logdir, together)
        state = self.cache.get(union)
        if not isinstance(state, Ready):
            shown.update({run.name: (run, union) for run in together})
            return dict(sorted(shown.items()))
        by_folder = {run.traces[0].run: run for run in together}
        for job in state.jobs:
            members = [by_folder.pop(folder) for folder in job.folders]
            run = members[0] if len(members) == 1 else joined(logdir, members)
            self.cache.seed(run, job)
            shown[run.name] = (run, run)
        # a folder in no job: none of its traces could be analysed; alone, its analysis says why
        shown.update({run.name: (run, run) for run in by_folder.values()})
        return dict(sorted(shown.items()))

    def _find(self, name: str | None) -> Run:
        """The run ``name`` under the logdir, or else a window written outside it (window_root)."""
        return self._located(name)[0]

    def _located(self, name: str | None) -> tuple[Run, Run]:
        """``_find``'s run, with the run whose analysis gives its state (``listing``)."""
        runs = self.listing(self.logdir)
        if name and name not in runs and self.windows != self.logdir.resolve():
            runs = self.listing(self.windows)
        if not name or name not in runs:
            raise LookupError(f"no run {name!r} with traces under {self.logdir}")
        return runs[name]

    def _state(self, name: str):
        """The run ``name`` and its Measured, or the response to give while it is analysed or when it failed;
        LookupError for an unknown run."""
        run, source = self._located(name)
        state = self.cache.wait(source, WAIT_S)
        if isinstance(state, Ready) and source is not run:  # its folders' analysis just ended: the run is a job
            run, source = self._located(name)
            state = self.cache.get(source) if source is run else Pending()
        if isinstance(state, Ready):
            return run, state.measured, None
        if isinstance(state, Pending):
            return run, None, _json({"name": name, "state": "analysing"}, 202)
        assert isinstance(state, Failed)
        return run, None, _json({"name": name, "state": "error", "error": state.message}, 422)

    @wrappers.Request.application
    def _runs(self, request):
        rows = []
        for name, (run, source) in self.listing(self.logdir).items():
            state = self.cache.get(source)
            if isinstance(state, Ready) and source is not run:  # listed a moment before its analysis ended
                rows.append({"name": name, "state": "analysing"})
            elif isinstance(state, Ready):
                rows.append(run_row(name, state.measured))
            elif isinstance(state, Failed):
                rows.append({"name": name, "state": "error", "error": state.message})
            else:
                rows.append({"name": name, "state": "analysing"})
        # under `stepscope tensorboard`, TensorBoard's logdir is a temporary shadow: name the user's folder
        return _json({"logdir": str(source_of(self.logdir) or self.logdir), "runs": rows})

    @wrappers.Request.application
    def _run(self, request):
        # a run of several folders: no folder of its own to hold out-of-memory captures
        return self._ready(request, lambda run, measured: run_view(run.name, measured, verification_of(run),
                                                                        None if run.folders else run.folder))

    @wrappers.Request.application
    def _ranks(self, request):
        return self._ready(request, lambda run, measured: ranks_view(run.name, measured))

    def _ready(self, request, view):
        """``view(run, analysis)`` of the run the request names, once its analysis is ready; 404 for an unknown
        run, and the state of an analysis still running or failed."""
        try:
            run, measured, response = self._state(request.args.get("run"))
        except LookupError as e:
            return _error(str(e), 404)
        if response is not None:
            return response
        return _json({"state": "ready", **view(run, measured)})

    @wrappers.Request.application
    def _diff(self, request):
        names = [request.args.get(side) for side in ("a", "b")]
        measured = []
        try:
            for name in names:
                self._find(name)  # both known before either is waited for
            for name in names:
                _, m, response = self._state(name)
                if response is not None:
                    return response
                measured.append(m)
        except LookupError as e:
            return _error(str(e), 404)
        return _json({"state": "ready", **compare_runs(*measured, *names)})

    @wrappers.Request.application
    def _window(self, request):
        if request.method != "POST":
            return _json({"error": "the window route writes, so it takes a POST from the stepscope tab"}, 405)
        if not hmac.compare_digest(request.headers.get(TOKEN_HEADER, "").encode(), self.token.encode()):
            return _error(f"no valid {TOKEN_HEADER}: windows are written from the stepscope tab's own page", 403)
        try:
            run = self._find(request.values.get("run"))
            first, stop = parse_steps(request.values.get("steps", ""))
            self.windows.mkdir(parents=True, exist_ok=True)
            name = write_window(self.windows, run, first, stop)
        except LookupError as e:
            return _error(str(e), 404)
        except OSError as e:
            return _error(f"{self.windows}: cannot write the window there ({e.strerror or e})")
        except (ValueError, WindowError) as e:
            return _error(str(e))
        window = find_runs(self.windows).get(name)
        traces = [{"i": i, "file": str(t.path.relative_to(window.folder)), "worker": t.worker}
                  for i, t in enumerate(window.traces)] if window else []
        return _json({"run": name, "from": run.name, "steps": [first, stop], "traces": traces,
                      "folder": str(self.windows / name), "in_logdir": self.windows == self.logdir.resolve()})

    @wrappers.Request.application
    def _trace(self, request):
        try:
            run = self._find(request.args.get("run"))
            i = int(request.args.get("i", "0"))
            path = run.traces[i].path
        except LookupError as e:
            return _error(str(e), 404)
        except (ValueError, IndexError):
            return _error(f"no trace {request.args.get('i')!r} in run {request.args.get('run')!r}", 404)
        return wrappers.Response(path.read_bytes(), content_type="application/octet-stream",
                                 headers={"Content-Disposition": f'attachment; filename="{path.name}"', **NOSNIFF})
