"""What a trace, a file name or a run name says is escaped before it reaches Markdown that TensorBoard's Text
tab (or any Markdown viewer) renders: diagnosis.md and the Text summary it is written as.

    pytest tests/test_hostile_names.py -q

TensorBoard's sanitizer keeps ``<img src>``, so an operator renamed ``aten::conv<img src="http://...">`` made
the Text tab fetch that address. Each case publishes real traces with hostile names the way
`stepscope tensorboard` does (tensorboard/watch.py) and renders the diagnosis with TensorBoard's own
Markdown-to-HTML function, the one its Text tab uses: no element and no off-host address may come out of
it, and the hostile text must still be shown (as text).
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

from stepscope.analysis.render import md_code, md_text
from stepscope.tensorboard.watch import WatchConfig, Watcher
from tensorboard.plugin_util import markdown_to_safe_html

DATA = Path(__file__).resolve().parent / "data"
BEACON = "http://203.0.113.7/beacon.png"
HOSTILE_OP = f'aten::conv<img src="{BEACON}">![b]({BEACON})'
HOSTILE_WORKER = "w<img src=x onerror=alert(1)>.<span>"
TOP_OP = "aten::convolution_backward"  # cpu_resnet's top op by self time, named in its evidence


def published(source: Path, tmp_path: Path) -> list[Path]:
    """The runs `stepscope tensorboard` publishes from ``source`` (three polls: a trace must be the same at
    two of them)."""
    logdir = tmp_path / "shadow"
    watcher = Watcher(WatchConfig(source, logdir, tmp_path / "staging"))
    for _ in range(3):
        watcher.poll()
    return sorted(p for p in logdir.iterdir() if p.is_dir())


def elements(html: str) -> list[str]:
    """The HTML elements other than Markdown's own text markup."""
    return [t for t in re.findall(r"<([a-zA-Z][a-zA-Z0-9]*)", html)
            if t not in {"p", "code", "strong", "em", "ul", "ol", "li", "table", "thead", "tbody", "tr", "th", "td",
                         "h1", "h2", "h3", "pre", "br", "hr"}]


def write_hostile_run(source: Path) -> None:
    """cpu_resnet's real trace with its top operator renamed HOSTILE_OP, in a file whose worker name is
    HOSTILE_WORKER."""
    source.mkdir(parents=True)
    trace = json.loads(gzip.decompress(next((DATA / "cpu_resnet").glob("*.gz")).read_bytes()))
    renamed = 0
    for e in trace["traceEvents"]:
        if e.get("name") == TOP_OP:
            e["name"], renamed = HOSTILE_OP, renamed + 1
    assert renamed
    (source / f"{HOSTILE_WORKER}.1795259064016889483.pt.trace.json.gz").write_bytes(
        gzip.compress(json.dumps(trace).encode(), 1))


def test_hostile_operator_and_worker_names_render_as_text(tmp_path):
    write_hostile_run(tmp_path / "src" / "run1")
    runs = published(tmp_path / "src", tmp_path)
    assert len(runs) == 1, runs
    for run in runs:
        md = (run / "diagnosis.md").read_text()
        html = markdown_to_safe_html(md)
        assert elements(html) == [], (run.name, elements(html))
        assert "src=" not in html.replace("&lt;img src=", "")  # no attribute outside escaped text
    html = markdown_to_safe_html((runs[0] / "diagnosis.md").read_text())
    assert "w&lt;img src=x onerror=alert(1)&gt;.&lt;span&gt;" in html  # the worker's name, as text
    assert f'aten::conv&lt;img src="{BEACON}"&gt;' in html  # the operator's name, as text


def test_escaped_text_and_code_render_as_themselves():
    for text in [HOSTILE_OP, HOSTILE_WORKER, "a | b & c <d>", "`x`<img src=y>"]:
        assert elements(markdown_to_safe_html(md_text(text))) == []
        assert elements(markdown_to_safe_html("`" + md_code(text) + "`")) == []
    assert markdown_to_safe_html(md_text("a & b <c>")) == "<p>a &amp; b &lt;c&gt;</p>"
