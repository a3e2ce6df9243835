"""README's `stepscope.trace_handler` example, run as written on the CPU, then read back through the real plugin.

    pytest tests/test_handler_readme.py -q      # about 40 s on 2 idle cores

The code block between `<!-- handler-example -->` and `<!-- /handler-example -->` in README.md runs in a fresh
process whose working directory is a temporary folder; `stepscope` is this checkout.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from stepscope.tensorboard.tbserver import TensorBoard
from stepscope.trace import files as trace_files

REPO = Path(__file__).resolve().parents[1]
RUN_WITH_CHECKOUT = ("import sys; "
                     "exec(compile(open(sys.argv[2]).read(), sys.argv[2], 'exec'))")


def readme_example() -> str:
    readme = (REPO / "README.md").read_text()
    m = re.search(r"<!-- handler-example -->\s*```python\n(.*?)```\s*<!-- /handler-example -->", readme, re.S)
    assert m, "README.md must hold the handler example in a python block between the handler-example markers"
    return m.group(1)


def test_example_is_short_and_changes_one_line_of_a_plain_loop():
    code = readme_example()
    assert len(code.splitlines()) <= 25
    assert "on_trace_ready=stepscope.trace_handler(" in code
    assert "import stepscope\n" in code  # the public name, not a module path


def test_readme_example_runs_and_the_plugin_shows_it(tmp_path):
    (tmp_path / "example.py").write_text(readme_example())
    p = subprocess.run([sys.executable, "-c", RUN_WITH_CHECKOUT, str(REPO / "scripts"), "example.py"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    run = tmp_path / "logs" / "my_loop"
    (adapted,) = trace_files.find_plugin_traces(run)
    (raw,) = trace_files.find_raw_traces(run)
    assert (adapted.worker, adapted.span) == (raw.worker, raw.span) and adapted.path.name.endswith(".gz")
    assert (run / "diagnosis.md").read_text().startswith("# stepscope diagnosis: `cpu_bound`")
    assert not [q.name for q in run.iterdir() if q.name.startswith(".tmp-")]
    with TensorBoard(tmp_path / "logs") as tb:
        tb.wait_for_runs(["my_loop"])
        worker, span = tb.first_worker_span("my_loop")
        assert worker == adapted.worker  # (the plugin numbers spans from 1)
        rows = tb.profiler("operation/table", run="my_loop", worker=worker, span=span, group_by="Operation")["data"]
        conv = next(r for r in rows if r["name"] == "aten::conv2d")
        assert conv["calls"] == 3 and conv["has_call_stack"]  # one per active step, called from Python
        (text,) = tb.get("/data/plugin/text/text", run="my_loop", tag="diagnosis")
        assert "stepscope diagnosis" in text["text"] and "cpu_bound" in text["text"]
        tags = tb.get("/data/plugin/scalars/tags")["my_loop"]
        assert "diagnosis/step_ms" in tags, tags
