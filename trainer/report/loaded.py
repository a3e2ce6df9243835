"""What `discover.py` found, loaded: each trace a ParsedTrace, or a reason to skip it.

    spans = assign_spans(found)                         # each trace's span (a spanless one gets its mtime)
    item = load_one(found, spans[found.path], parse_path(found.path, found.worker, span))   # Loaded | Skipped
    light(item)                                         # the trace without its events: what jobs.py reads

Each trace is parsed streaming into a ParsedTrace (analysis/stream_parse.py), never held as JSON. A trace
that does not parse is an error (TraceError, one line). A Lightning trace without ProfilerStep# or
Optimizer.step# events, or a file that was only sniffed as a Chrome trace and holds no torch operators
either, is skipped (see skip_reason). A trace whose name carries no span gets one: the file's mtime in ns,
shared by every spanless trace of the same run folder so that the ranks of an accelerate run pair up.
The engine behind the door (engine.py) does this for each trace where it is read (this process, a local
process, a Dask task), and keeps only its report, with the little that jobs.py groups jobs by.
Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from stepscope.analysis.events import ParsedTrace
from stepscope.analysis.stream_parse import NoSteps, Unreadable, has_step_names
from stepscope.trace.discover import Found, Skipped
from stepscope.trace.errors import TraceError
from stepscope.trace.sources import STEPS_ANY, STEPS_OWN, STEPS_REQUIRED, by_kind
from stepscope.trace.vocabulary import STEPS_FROM_WINDOW

# what a trace without steps needs: prof.step() marks each step only under a schedule
NO_STEPS = ("no ProfilerStep#, Optimizer.step# or torch operator events; profile with "
            "schedule=torch.profiler.schedule(...) and call prof.step() once per training step")


@dataclass(frozen=True)
class Loaded:
    found: Found
    span: str  # found.span, or the one given to a spanless trace
    parsed: ParsedTrace

    @property
    def worker(self) -> str:
        return self.found.worker


def skip_reason(found: Found, error: TraceError) -> str | None:
    """Why a found file that did not parse is not a trace to analyse after all; None when ``error`` stands.
    Traces of stepscope and tensorboard_trace_handler are always analysed (a trace without steps is then an
    error that says how to fix the loop); Lightning's also profiles actions without steps (e.g.
    validation_step), which are skipped, as are sniffed files with nothing to take steps from: each source's
    ``steps`` policy (trace/sources.py)."""
    steps = by_kind(found.kind).steps
    if steps == STEPS_REQUIRED or isinstance(error, Unreadable):
        return None
    if isinstance(error, NoSteps):
        return None if error.step_names else _skip(found, None)
    if steps == STEPS_OWN and not has_step_names(found.path):
        return _skip(found, None)
    return None


def _skip(found: Found, source: str | None) -> str | None:
    """Why a trace whose steps come from ``source`` (None: from nothing) is skipped; None when it is not."""
    steps = by_kind(found.kind).steps
    if steps == STEPS_REQUIRED or (source is not None and (source != STEPS_FROM_WINDOW or steps == STEPS_ANY)):
        return None
    if steps == STEPS_OWN:
        return "no ProfilerStep# or Optimizer.step# events"
    return NO_STEPS


def assign_spans(found: list[Found]) -> dict[Path, str]:
    """Each trace's span: its own, or the smallest mtime in ns among the spanless traces of its folder."""
    shared: dict[Path, int] = {}
    for f in found:
        if not f.span:
            mtime = f.path.stat().st_mtime_ns
            shared[f.path.parent] = min(mtime, shared.get(f.path.parent, mtime))
    return {f.path: f.span or str(shared[f.path.parent]) for f in found}


def load_one(found: Found, span: str, parsed: ParsedTrace | TraceError) -> Loaded | Skipped:
    """A found trace as the engine loads it, given its parse (report.parse_path): loaded, or skipped;
    raises the parse's TraceError if it stands."""
    if isinstance(parsed, ParsedTrace):
        # a Lightning action without steps of its own, a sniffed file without torch operators
        reason = _skip(found, parsed.steps_from if parsed.steps_from != STEPS_FROM_WINDOW or parsed.ops else None)
        return Skipped(found.path, reason) if reason else Loaded(found, span, parsed)
    reason = skip_reason(found, parsed)
    if reason is None:
        raise parsed
    return Skipped(found.path, reason)


def light(item: Loaded) -> Loaded:
    """``item`` with only what jobs.py reads of its events: its rank, world size, first and last steps."""
    p = item.parsed
    return replace(item, parsed=replace(p, steps=p.steps[:1] + p.steps[1:][-1:], ops=(), annotations=(),
                                        runtime=(), device=(), data_spans=(), memory=(), python_calls=(),
                                        python_builtins=(), long_frames=(), model_spans=(),
                                        module_frames=()))
