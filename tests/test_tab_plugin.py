"""The stepscope tab's JSON routes, called through werkzeug's test client on the real plugin (no browser):
figures equal to `stepscope analyze --json`, the analysis cached in the user's cache (beside the run only
under `stepscope tensorboard`; in memory when neither can be written), no GET writing into the logdir, the
window route, and bad input."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from stepscope.analysis import vocabulary
from stepscope.analysis.verdicts import VERDICTS
from stepscope.analysis.vocabulary import BUCKETS, COPIES, FINDINGS, PHASES, bucket
from stepscope.report.front import analyze
from stepscope.tensorboard.shadow_root import WINDOWS_HERE
from stepscope.tensorboard.tab.cache import CACHE_DIR, CACHE_FILE, cache_file
from stepscope.tensorboard.tab.plugin import TOKEN_HEADER, StepscopePlugin, analysis_root, window_root
from tensorboard.plugins import base_plugin
from werkzeug import Client
from werkzeug.wrappers import Response

DATA = Path(__file__).resolve().parent / "data"


class App:
    """The plugin's routes as one WSGI app, the way TensorBoard mounts them under /data/plugin/stepscope."""

    def __init__(self, logdir: Path) -> None:
        self.plugin = StepscopePlugin(base_plugin.TBContext(logdir=str(logdir)))
        self.routes = self.plugin.get_plugin_apps()
        self.client = Client(self, Response)

    def __call__(self, environ, start_response):
        path = environ["PATH_INFO"]
        app = self.routes.get(path) or next(a for p, a in self.routes.items()
                                            if p.endswith("/*") and path.startswith(p[:-1]))
        return app(environ, start_response)

    def get(self, route: str, ready: bool = True, **params):
        for _ in range(600):  # 202 while the run is analysed in the background
            r = self.client.get(route, query_string=params)
            if r.status_code != 202 or not ready:
                return r.status_code, json.loads(r.get_data())
        raise TimeoutError(route)

    def post_window(self, **params):
        """The window route as the tab's page calls it: a POST with the token its index.js holds."""
        r = self.client.post("/window", data=params, headers={TOKEN_HEADER: self.plugin.token})
        return r.status_code, json.loads(r.get_data())


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch):
    """The user's cache folder, outside the logdir (which is the test's tmp_path); every test has its own."""
    folder = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("XDG_CACHE_HOME", str(folder))
    monkeypatch.delenv(WINDOWS_HERE, raising=False)
    return folder


def listing(folder: Path) -> list:
    """Every path under ``folder``, with its size and mtime."""
    return sorted((str(p.relative_to(folder)), p.lstat().st_size, p.lstat().st_mtime_ns) for p in folder.rglob("*"))


@pytest.fixture
def logdir(tmp_path):
    for name in ("cpu_resnet", "eager_bs32"):
        shutil.copytree(DATA / name, tmp_path / name)
    shutil.copytree(DATA / "suite_ddp" / "straggler", tmp_path / "ddp")
    return tmp_path


def test_runs_and_run_match_analyze_json_and_are_cached_in_the_users_cache(logdir, cache):
    app = App(logdir)
    _, body = app.get("/runs")
    assert [r["name"] for r in body["runs"]] == ["cpu_resnet", "ddp", "eager_bs32"]
    code, run = app.get("/run", run="eager_bs32")
    want = analyze(logdir / "eager_bs32").to_dict()
    assert code == 200 and run["report"] == json.loads(json.dumps(want))
    assert run["figures"]["step_ms"] == want["spans"][0]["metrics"]["step_ms"]
    assert run["spans"][0]["top"][0]["share_of_step_pct"] > 0
    kept = cache_file(logdir / "eager_bs32", analysis_root(logdir))
    assert kept.is_file() and cache in kept.parents
    assert not (logdir / "eager_bs32" / CACHE_DIR).exists()
    _, rows = app.get("/runs")
    row = next(r for r in rows["runs"] if r["name"] == "eager_bs32")
    assert row["verdict"] == want["verdict"] and row["gpu_busy_pct"] == want["spans"][0]["metrics"]["gpu_busy_pct"]
    assert row["trend"] == [{"cycle": 0, "step_ms": row["step_ms"], "gpu_busy_pct": row["gpu_busy_pct"],
                             "profiled_step_ms": want["spans"][0]["metrics"]["profiled"]["step_ms"]}]
    # a new TensorBoard answers from the cache file at once, without parsing the trace
    again = App(logdir)
    code, first = again.get("/run", ready=False, run="eager_bs32")
    assert code == 200 and first["report"] == run["report"]
    # a trace written again invalidates it
    trace = next((logdir / "eager_bs32").glob("*.json.gz"))
    os.utime(trace, ns=(trace.stat().st_atime_ns, trace.stat().st_mtime_ns + 10**9))
    assert again.plugin.cache.get(again.plugin._find("eager_bs32")).__class__.__name__ == "Pending"


def test_no_get_writes_into_a_plain_tensorboards_logdir(logdir, cache):
    """Every route the tab's page GETs, on every run: the logdir's files (names, sizes, mtimes) are as they
    were; the analyses are in the user's cache."""
    before = listing(logdir)
    app = App(logdir)
    assert app.get("/runs")[0] == 200
    for name in ("cpu_resnet", "ddp", "eager_bs32"):
        assert app.get("/run", run=name)[0] == 200
    assert app.get("/ranks", run="ddp")[0] == 200
    assert app.get("/diff", a="cpu_resnet", b="eager_bs32")[0] == 200
    assert app.client.get("/trace", query_string={"run": "ddp", "i": 0}).status_code == 200
    assert app.client.get("/index.js").status_code == 200
    _, rows = App(logdir).get("/runs")  # a second TensorBoard reads the analyses back
    assert [r["state"] for r in rows["runs"]] == ["ready"] * 3
    assert listing(logdir) == before
    assert len(list(analysis_root(logdir).glob("*.json"))) == 3


def test_under_stepscope_tensorboard_the_analysis_is_kept_beside_the_run(logdir, cache, monkeypatch):
    """`stepscope tensorboard` serves its own shadow logdir (named in TensorBoard's environment): there the
    analysis goes beside the run, and nothing into the user's cache."""
    monkeypatch.setenv(WINDOWS_HERE, str(logdir))
    assert App(logdir).get("/run", run="eager_bs32")[0] == 200
    assert (logdir / "eager_bs32" / CACHE_DIR / CACHE_FILE).is_file() and not any(cache.rglob("*.json"))


def test_a_run_where_the_cache_cannot_be_written_is_cached_in_memory(logdir, cache, monkeypatch):
    # a file where the cache folder would go: writing fails for every user, root included (a read-only
    # folder does not stop root)
    blocked = cache / "blocked"
    blocked.write_text("not a folder")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    before = listing(logdir)
    app = App(logdir)
    code, body = app.get("/run", run="cpu_resnet")
    assert code == 200 and body["verdict"] == "cpu_bound"
    assert blocked.read_text() == "not a folder" and listing(logdir) == before
    assert app.get("/run", ready=False, run="cpu_resnet")[0] == 200  # from memory, at once


def test_ranks_mark_the_straggler_with_its_reason(logdir):
    code, body = App(logdir).get("/ranks", run="ddp")
    job = body["jobs"][0]
    assert code == 200 and [r["rank"] for r in job["ranks"]] == [0, 1]
    assert job["cycle"] == 0  # numbered from 0, as diagnosis.md and cycles.jsonl number cycles
    assert [s["rank"] for s in job["stragglers"]] == [1]
    why = job["stragglers"][0]
    given = analyze(logdir / "ddp").to_dict()["distributed"][0]["stragglers_why"][0]
    assert why["why"] == given["text"] and "host work outside torch ops" in why["why"]
    assert why["phase_differences"][0]["bucket"] == "exposed_comm"  # the largest difference first
    assert why["top_differing"][0]["name"] == "straggler_delay"


def test_the_ranks_view_reads_the_reports_reference_and_recomputes_nothing(logdir):
    """The straggler's reference breakdown and its phase differences are the report's own (cross_rank.py),
    as the report says them; the tab adds nothing it would have to compute again."""
    code, body = App(logdir).get("/ranks", run="ddp")
    job, given = body["jobs"][0], analyze(logdir / "ddp").to_dict()["distributed"][0]
    assert code == 200 and job["median_breakdown_ms"] == given["median_breakdown_ms_per_step"]
    assert set(job["median_breakdown_ms"]) == set(job["buckets"]) and sum(job["median_breakdown_ms"].values()) > 0
    (why,) = job["stragglers"]
    phases = {x["phase"]: x for x in given["stragglers_why"][0]["phases"]}
    assert {x["bucket"] for x in why["phase_differences"]} == set(phases)
    assert all(x["median_ms"] == round(phases[x["bucket"]]["median_ms"], 4) for x in why["phase_differences"])


def test_verification_is_shown_when_the_run_has_one(logdir):
    record = {"final": {}, "verification": {"verdict": "launch_bound", "result": "confirmed",
                                            "measured_speedup": 1.8, "predicted_speedup": 2.0}}
    (logdir / "eager_bs32" / "run.json").write_text(json.dumps(record))
    _, body = App(logdir).get("/run", run="eager_bs32")
    assert body["verification"]["result"] == "confirmed"


def test_diff_route_is_the_cli_comparison(logdir):
    code, d = App(logdir).get("/diff", a="cpu_resnet", b="eager_bs32")
    assert code == 200 and d["a"]["run"] == "cpu_resnet" and d["b"]["verdict"] == "launch_bound"
    assert d["source"] == "trace" and d["a"]["steps"] == 2 and "summary" in d


def test_window_writes_a_small_run_for_both_tabs(logdir, cache):
    """Under a plain TensorBoard the window goes to the user's cache, never into the logdir; the answer says
    where, and the tab still finds its summary and traces."""
    before = sorted(p.relative_to(logdir) for p in logdir.rglob("*"))
    app = App(logdir)
    code, w = app.post_window(run="ddp", steps="3:5")
    assert code == 200 and w["run"] == "ddp.steps3-4" and not w["in_logdir"]
    folder = Path(w["folder"])
    assert folder.parent == window_root(logdir) and cache in folder.parents
    assert sorted(p.relative_to(logdir) for p in logdir.rglob("*")) == before  # nothing written in the logdir
    assert len(list(folder.glob("*.pt.trace.json.gz"))) == 2  # the PyTorch Profiler tab's copies
    assert len(list(folder.glob("raw/*/*.trace.json.gz"))) == 2  # the untouched windows, for Perfetto
    code, run = app.get("/run", run="ddp.steps3-4")
    assert code == 200 and {s["evidence"][0].split("(")[1] for s in run["spans"]} == {"2 profiled steps analysed)"}
    import gzip
    window = json.loads(gzip.decompress(next(folder.glob("raw/*/*.trace.json.gz")).read_bytes()))
    steps = sorted(e["name"] for e in window["traceEvents"] if e.get("name", "").startswith("ProfilerStep#"))
    assert steps == ["ProfilerStep#3", "ProfilerStep#4"]
    assert any(e.get("ph") == "M" for e in window["traceEvents"])  # process and thread names kept
    assert window["distributedInfo"]["rank"] in (0, 1)  # the trace's other top-level keys too
    r = app.client.get("/trace", query_string={"run": "ddp.steps3-4", "i": 0})
    assert r.status_code == 200 and r.get_data()[:2] == b"\x1f\x8b"


def test_window_writes_only_on_a_post_with_the_pages_token(logdir, cache, monkeypatch):
    """A GET (what any web page can make a browser send to a loopback address) writes nothing; a POST
    without the token that index.js carries is refused; under `stepscope tensorboard` (its shadow logdir
    named in TensorBoard's environment) the window is written into that logdir, where both tabs list it."""
    before = sorted(logdir.rglob("*"))
    app = App(logdir)
    r = app.client.get("/window", query_string={"run": "ddp", "steps": "3:5"})
    assert r.status_code == 405
    r = app.client.post("/window", data={"run": "ddp", "steps": "3:5"})
    assert r.status_code == 403 and "X-Stepscope-Token" in json.loads(r.get_data())["error"]
    r = app.client.post("/window", data={"run": "ddp", "steps": "3:5"}, headers={TOKEN_HEADER: "guessed"})
    assert r.status_code == 403
    assert sorted(logdir.rglob("*")) == before and not any(cache.iterdir())
    script = app.client.get("/index.js").get_data(as_text=True)
    assert f"const WINDOW_TOKEN = '{app.plugin.token}';" in script and "%STEPSCOPE_TOKEN%" not in script
    assert App(logdir).plugin.token != app.plugin.token  # each process makes its own

    monkeypatch.setenv(WINDOWS_HERE, str(logdir))
    code, w = App(logdir).post_window(run="ddp", steps="3:5")
    assert code == 200 and w["in_logdir"] and Path(w["folder"]) == logdir.resolve() / "ddp.steps3-4"


@pytest.mark.parametrize("route, params, code, message", [
    ("/run", {"run": "nope"}, 404, "no run 'nope'"),
    ("/static/../plugin.py", {}, 404, "no static file"),
])
def test_bad_input_is_one_line(logdir, route, params, code, message):
    got, body = App(logdir).get(route, **params)
    assert got == code and message in body["error"] and "\n" not in body["error"]


@pytest.mark.parametrize("params, message", [({"run": "ddp", "steps": "5:3"}, "use A:B"),
                                             ({"run": "ddp", "steps": "40:50"}, "no trace has steps in 40:50")])
def test_bad_window_is_one_line(logdir, cache, params, message):
    got, body = App(logdir).post_window(**params)
    assert got == 400 and message in body["error"] and "\n" not in body["error"]


def test_stepscope_tensorboard_shadow_run_keeps_the_trainers_figures(tmp_path):
    """`stepscope tensorboard` serves a shadow copy of each run: the copy of a trainer run keeps its run.json,
    so the tab shows the unprofiled figures `stepscope analyze` gives on the source run."""
    from stepscope.report.loaded import assign_spans
    from stepscope.tensorboard.shadow import publish_run
    from stepscope.trace.discover import discover

    source = tmp_path / "src" / "run1"
    trace = next((DATA / "cpu_resnet").glob("*.json.gz"))
    worker, span = trace.name.split(".")[:2]
    (source / "raw" / span).mkdir(parents=True)
    shutil.copy(trace, source / "raw" / span / f"{worker}.trace.json.gz")
    record = {"final": {"telemetry": {"steps": 4, "step_ms": 150.0, "data_ms": 1.0},
                        "step_times_ms": [149.0, 151.0, 150.5, 149.5]},
              "verification": {"verdict": "cpu_bound", "result": "refuted"}}
    (source / "run.json").write_text(json.dumps(record))
    found = discover(source).traces
    spans = assign_spans(list(found))
    shadow = tmp_path / "shadow"
    path, _ = publish_run([(f, spans[f.path]) for f in found], analyze(source, traces=found, tables=True), shadow,
                          tmp_path / "staging", "run1", source=source)
    assert json.loads((path / "run.json").read_text()) == record
    _, body = App(shadow).get("/run", run="run1")
    want = analyze(source).to_dict()
    assert body["report"]["spans"][0]["metrics"] == want["spans"][0]["metrics"]
    assert body["figures"]["step_ms"] == 150.0 and body["verification"]["result"] == "refuted"
    assert body["steps"] == {"source": "run.json", "count": 4}


def test_other_tools_runs_are_listed_like_the_trainers(tmp_path):
    shutil.copytree(DATA / "lightning_cpu", tmp_path / "lightning")
    app = App(tmp_path)
    assert app.get("/runs")[1]["runs"] == [{"name": "lightning", "state": "analysing"}]  # at once, not waiting
    app.get("/run", run="lightning")
    (row,) = app.get("/runs")[1]["runs"]
    assert row["name"] == "lightning" and row["verdict"] == analyze(tmp_path / "lightning").verdict


def test_a_run_that_cannot_be_analysed_says_why_in_one_line(tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "w.1795259064016889483.pt.trace.json").write_text('{"traceEvents": [{"name": "ProfilerStep#1", ')
    app = App(tmp_path)
    code, body = app.get("/run", run="bad")
    assert code == 422 and body["state"] == "error" and "w.1795259064016889483.pt.trace.json" in body["error"]
    assert "\n" not in body["error"]
    (row,) = app.get("/runs")[1]["runs"]
    assert row["state"] == "error" and row["error"] == body["error"]


def test_a_users_loop_run_matches_analyze(tmp_path):
    """A folder written by a plain torch.profiler loop with stepscope.schedule and stepscope.trace_handler."""
    import stepscope
    import torch
    from torch import nn

    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
    run = tmp_path / "my_loop"
    handler = stepscope.trace_handler(run)
    with torch.profiler.profile(schedule=stepscope.schedule(wait=3, warmup=1, active=3, repeat=1),
                                on_trace_ready=handler) as prof:
        for _ in range(12):
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
    handler.close(60)
    app = App(tmp_path)
    code, body = app.get("/run", run="my_loop")
    want = analyze(run).to_dict()
    assert code == 200 and body["report"] == json.loads(json.dumps(want))
    (row,) = app.get("/runs")[1]["runs"]
    assert row["name"] == "my_loop" and row["verdict"] == want["verdict"]


def test_a_run_past_its_time_bound_fails_and_the_others_are_still_analysed(logdir, monkeypatch):
    """Each run's analysis process is killed at its time bound, and the run shows that in one line; the
    runs after it are analysed. The bound is set to nothing here, for one run, to stand for a trace whose
    analysis would never end."""
    from stepscope.tensorboard.tab import cache as cache_module

    app = App(logdir)
    bounds = cache_module.TIME_BASE_S, cache_module.TIME_PER_GB_S
    monkeypatch.setattr(cache_module, "TIME_BASE_S", 0.0)
    monkeypatch.setattr(cache_module, "TIME_PER_GB_S", 0.0)
    code, body = app.get("/run", run="eager_bs32")
    assert code == 422 and "the analysis took more than 0 s and was stopped" in body["error"], body
    assert "\n" not in body["error"]
    monkeypatch.setattr(cache_module, "TIME_BASE_S", bounds[0])
    monkeypatch.setattr(cache_module, "TIME_PER_GB_S", bounds[1])
    code, body = app.get("/run", run="cpu_resnet")
    assert code == 200 and body["state"] == "ready"


def test_the_runs_list_names_the_users_logdir_not_the_shadow(tmp_path):
    """Under `stepscope tensorboard` TensorBoard reads a temporary shadow logdir; the tab names the folder the
    user gave (the server notes it in the shadow), and any other logdir as it is."""
    from stepscope.tensorboard.shadow_root import note_source

    users, shadow = tmp_path / "logs", tmp_path / "stepscope-tb-x" / "logdir"
    users.mkdir()
    shutil.copytree(DATA / "cpu_resnet", shadow / "cpu_resnet")
    assert App(shadow).get("/runs")[1]["logdir"] == str(shadow)
    note_source(shadow, users)
    _, body = App(shadow).get("/runs")
    assert body["logdir"] == str(users.resolve()) and [r["name"] for r in body["runs"]] == ["cpu_resnet"]


def test_the_vocabulary_route_gives_the_registries_names_and_colours(tmp_path):
    """What index.js names and colours comes from the registries through this route (the page holds no copy)."""
    code, body = App(tmp_path).get("/vocabulary")
    assert code == 200
    assert list(body["buckets"]) == [b.name for b in BUCKETS]
    assert {k: v["colour"] for k, v in body["buckets"].items()} == {b.name: b.colour for b in BUCKETS}
    assert body["buckets"][vocabulary.DATA]["cpu_label"] == bucket(vocabulary.DATA).label_on(gpu=False)
    assert list(body["phases"]) == [p.name for p in PHASES] and list(body["findings"]) == [f.id for f in FINDINGS]
    assert body["phases"][vocabulary.DATA]["colour"] == bucket(vocabulary.DATA).colour and body["phases"][COPIES]["colour"] is None
    assert list(body["verdicts"]) == list(VERDICTS)
    assert {n for n, v in body["verdicts"].items() if v["tone"] == "good"} == {"gpu_bound"}
    assert body["fallback_colours"]
