"""How long the stepscope tab takes on a large run: its first analysis, its summary once cached, a window.

    python scripts/bench_analysis.py build --size 1G --out /tmp/bench/logs/r1g    # a 1 GB run (real events)
    python scripts/bench_tab.py /tmp/bench/logs --run r1g --steps 40:43

Calls the plugin's routes in this process, through werkzeug's test client (what TensorBoard serves them
with, minus the HTTP), on a fresh plugin each time, and prints one line per measurement:

    first analysis (background, until /run answers)   ... s
    /runs + /run from the cache file, new plugin         ... s   (the page's summary)
    window A:B written as its own run                    ... s

The run's cached analysis (cache.py, in the user's cache) and the window run are removed first, so every number is
from scratch.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from stepscope.tensorboard.tab.cache import cache_file
from stepscope.tensorboard.tab.plugin import (
    TOKEN_HEADER,
    StepscopePlugin,
    analysis_root,
    parse_steps,
    window_root,
)
from stepscope.tensorboard.tab.window import window_name
from tensorboard.plugins import base_plugin
from werkzeug import Client
from werkzeug.wrappers import Response


def client(logdir: Path) -> Client:
    plugin = StepscopePlugin(base_plugin.TBContext(logdir=str(logdir)))
    routes = plugin.get_plugin_apps()
    c = Client(lambda environ, start: routes[environ["PATH_INFO"]](environ, start), Response)
    c.plugin = plugin  # its window token and where it writes windows
    return c


def until_ready(c: Client, route: str, **params) -> dict:
    """The route's answer once it is no 202, asked every POLL_S: often enough to see the moment the analysis
    is ready, seldom enough to leave the cores to it (asking in a tight loop took one of the two)."""
    while True:
        r = c.get(route, query_string=params)
        if r.status_code != 202:
            assert r.status_code == 200, r.get_data()[:500]
            return json.loads(r.get_data())
        time.sleep(POLL_S)


POLL_S = 0.02


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("logdir", type=Path)
    p.add_argument("--run", required=True)
    p.add_argument("--steps", default="40:43", help="the window, A:B (ProfilerStep#A .. #B-1)")
    a = p.parse_args()
    first, stop = parse_steps(a.steps)
    cache_file(a.logdir / a.run, analysis_root(a.logdir)).unlink(missing_ok=True)
    shutil.rmtree(window_root(a.logdir) / window_name(a.run, first, stop), ignore_errors=True)

    t = time.perf_counter()
    until_ready(client(a.logdir), "/run", run=a.run)
    print(f"first analysis (background, until /run answers)   {time.perf_counter() - t:8.2f} s")

    t = time.perf_counter()
    c = client(a.logdir)
    rows = until_ready(c, "/runs")
    run = until_ready(c, "/run", run=a.run)
    print(f"/runs + /run from the cache file, new plugin         {time.perf_counter() - t:8.2f} s   "
          f"({run['verdict']}, {len(rows['runs'])} runs)")

    t = time.perf_counter()
    r = c.post("/window", data={"run": a.run, "steps": a.steps}, headers={TOKEN_HEADER: c.plugin.token})
    assert r.status_code == 200, r.get_data()[:500]
    w = json.loads(r.get_data())
    print(f"window {a.steps} written as its own run ({w['run']})   {time.perf_counter() - t:8.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
