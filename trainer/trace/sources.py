"""The table of trace sources: what writes torch.profiler traces, how its files are named, where their steps
come from, and the marks inside a trace that tell its loop. One record each, and nowhere else. Torch-free.

    from stepscope.trace.sources import SOURCES, by_kind, of_name
    of_name("fit-m-[Strategy]SingleDeviceStrategy.training_step.3.pt.trace.json")
        # (LIGHTNING, "fit-m-[Strategy]SingleDeviceStrategy.training_step", "3")
    by_kind(LIGHTNING).steps              # STEPS_OWN: an action without steps of its own is skipped
    loop_source(annotation_names, long_frames).style      # "lightning": the overhead model's error band

A record holds:
- ``kind``: the name discovery gives its traces (``stepscope analyze`` prints it: "found 2 traces (2
  Lightning)");
- ``names``: the file names it writes, a pattern whose groups ``worker`` and ``span`` (either optional; the
  span may keep a leading dot) name the trace (torch's tensorboard_trace_handler names are the plugin's own
  pattern, trace/files.WORKER_PATTERN); None for a source told apart only by what its traces hold (a
  Trainer writing through torch's handler). ``workers``, where given, is the worker names it writes among
  files that another source's pattern matches too (Lightning's handler files). Sources are tried in table order, a ``sniffed`` one only
  once the file's head shows a Chrome trace (any JSON file could bear its name);
- ``steps``: where its traces' steps come from (STEPS_REQUIRED, STEPS_OWN or STEPS_ANY below);
- ``style``, ``marks``, ``contains``, ``frames``: the loop style its traces read as (the overhead model's
  measured error band, analysis/step_range.py's BANDS) and what in a trace tells it: a record_function range
  whose name starts with one of ``marks`` or holds one of ``contains``, or a with_stack Python frame of one
  of the files ``frames``. The first source in table order whose marks a trace holds gives its style; none:
  eager;
- ``records_up``: how many folders above a trace's own folder its run's records lie (run.json,
  cycles.jsonl: report/telemetry.py);
- ``example``: where it writes a trace in a run folder, which tests/test_vocabulary.py writes a real trace
  at and discovers as its kind.

stepscope's own run layout (``<run>/raw/<span>/<worker>.trace.json[.gz]``, trace/files.py) is found by its
folders rather than by a name alone (discover.raw_traces); its record holds its kind and step policy.

Adding a trace source (say a framework whose profiler writes ``<worker>.rank<N>.json``) is one record here,
placed where it should be tried (before a source whose names also match its files), with its example path,
and its test: a real trace of it in tests/data, read with its steps and its verdict against the truth
measured without the profiler (as tests/test_foreign_traces.py reads Lightning's and the plain loops'). A
loop style with marks also needs its measured error band, analysis/step_range.py's BANDS (measured with
scripts/calibrate_overhead.py); without one it reads as eager. tests/test_vocabulary.py holds this docstring
to the table and discovers every example.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from stepscope.trace.files import WORKER_PATTERN

# Where a source's steps come from:
STEPS_REQUIRED = "required"  # ProfilerStep# ranges, which it always writes: a trace without any is an error
#                              that says how to mark the loop's steps
STEPS_OWN = "own"  # ProfilerStep# or Optimizer.step# ranges, else the trace is skipped (a framework's action
#                    recorded without steps: validation, prediction)
STEPS_ANY = "any"  # those ranges, else the whole recorded window of torch operators as one step, else skipped

# Loop styles (analysis/step_range.py's BANDS): a loop without any source's marks is eager
EAGER, LIGHTNING_LOOP, HF_LOOP, COMPILED_LOOP = "eager", "lightning", "hf", "compiled"

STEPSCOPE = "stepscope"
LIGHTNING = "Lightning"
HANDLER = "tensorboard_trace_handler"
HF_TRAINER = "Hugging Face Trainer"
ACCELERATE = "accelerate"
CHROME = "export_chrome_trace"
TORCH_COMPILE = "torch.compile"


@dataclass(frozen=True)
class Source:
    kind: str
    names: re.Pattern | None  # the file names it writes (groups ``worker``, ``span``); None: by content only
    steps: str  # STEPS_REQUIRED | STEPS_OWN | STEPS_ANY
    workers: re.Pattern | None = None  # its worker names, among files another source's names match too
    sniffed: bool = False  # a trace only if its head shows one (trace/discover.looks_like_trace)
    style: str | None = None  # the loop style its marks name
    marks: tuple[str, ...] = ()  # record_function name prefixes that tell its loop
    contains: tuple[str, ...] = ()  # ... and substrings that do
    frames: tuple[str, ...] = ()  # with_stack frames of these files (the name starts with the path) that do
    records_up: int = 0  # folders above a trace's own folder that its run's records lie (0: beside it)
    example: str | None = None  # a trace's path in a run folder, as it writes it (tests/test_vocabulary.py)

    def name_parts(self, name: str) -> tuple[str, str] | None:
        """(worker, span) of a file name this source writes ("" for a part the name lacks), else None."""
        if self.names is None:
            return None
        m = self.names.match(name)
        if m is None:
            return None
        groups = m.groupdict()
        worker = groups.get("worker")
        if worker is None:
            worker = stem(name)
        if self.workers is not None and not self.workers.match(worker):
            return None
        return worker, (groups.get("span") or "").removeprefix(".")

    def frame_marked(self, name: str) -> bool:
        """A with_stack frame of one of its ``frames`` files: the file's path starts the name, as far as
        site-packages or in full (a file of another package that merely ends in the same path does not
        count)."""
        for mark in self.frames:
            at = name.find(mark)
            if at == 0 or (at > 0 and name[at - 1] in "/\\"):
                return True
        return False

    def marks_loop(self, annotation_names, long_frames) -> bool:
        """Whether a trace with these record_function names and long Python frames was recorded in its loop."""
        return (any(n.startswith(self.marks) or any(c in n for c in self.contains) for n in annotation_names)
                or any(self.frame_marked(f) for f in long_frames))


SOURCES = (
    # our trainer and stepscope.trace_handler: <run>/raw/<span>/<worker>.trace.json[.gz] (discover.raw_traces)
    Source(STEPSCOPE, None, STEPS_REQUIRED, records_up=2, example="raw/1795785129300760509/host_1.trace.json.gz"),
    # Lightning's PyTorchProfiler: tensorboard_trace_handler under a "<stage>-<filename>-<action>" worker, the
    # action being e.g. "[Strategy]SingleDeviceStrategy.training_step" or "[LightningModule]M.validation_step"
    Source(LIGHTNING, WORKER_PATTERN, STEPS_OWN, workers=re.compile(r"^(fit|validate|test|predict)-.*\[[A-Za-z_]+\]"),
           style=LIGHTNING_LOOP,
           marks=("[pl][profile]", "[Strategy]", "[LightningModule]", "[Callback]", "[_TrainingEpochLoop]"),
           example="fit-profile-[Strategy]SingleDeviceStrategy.training_step.1795378849864529479.pt.trace.json"),
    Source(HANDLER, WORKER_PATTERN, STEPS_REQUIRED, example="host_1.1795259108694019705.pt.trace.json.gz"),
    # Hugging Face's Trainer writes through torch's handler; its frames (with_stack only), named
    # "<path>transformers/trainer.py(<line>): <function>", tell its loop
    Source(HF_TRAINER, None, STEPS_REQUIRED, style=HF_LOOP,
           frames=("transformers/trainer.py(", "transformers\\trainer.py(")),
    # accelerate's ProfileKwargs(output_trace_dir=...): profile_<process_index>.json
    Source(ACCELERATE, re.compile(r"^profile_\d+\.json(\.gz)?$"), STEPS_ANY, sniffed=True, example="profile_0.json"),
    # torch.profiler's export_chrome_trace: any other JSON file that is a Chrome trace
    Source(CHROME, re.compile(r"^.*\.json(\.gz)?$"), STEPS_ANY, sniffed=True, example="my_loop.json.gz"),
    # a torch.compile'd model, recorded with record_shapes: inductor's "## Call CompiledFxGraph <hash> ##"
    Source(TORCH_COMPILE, None, STEPS_REQUIRED, style=COMPILED_LOOP, contains=("CompiledFxGraph",)),
)
KINDS = tuple(s.kind for s in SOURCES)


def by_kind(kind: str) -> Source:
    for s in SOURCES:
        if s.kind == kind:
            return s
    raise KeyError(f"{kind}: not a trace source (one of {', '.join(KINDS)})")


def of_name(name: str, sniffed: bool = False) -> tuple[str, str, str] | None:
    """(kind, worker, span) of the first source that writes a file of this name, among the sources that are
    told by their names alone (``sniffed`` False) or among those whose files must look like a trace (True)."""
    for s in SOURCES:
        if s.sniffed == sniffed:
            parts = s.name_parts(name)
            if parts is not None:
                return (s.kind, *parts)
    return None


def loop_source(annotation_names, long_frames) -> Source | None:
    """The first source whose marks the trace holds (its loop style), else None (eager)."""
    return next((s for s in SOURCES if s.style is not None and s.marks_loop(annotation_names, long_frames)), None)


def stem(name: str) -> str:
    """A trace file's name without its suffixes."""
    return name.removesuffix(".gz").removesuffix(".json").removesuffix(".pt.trace").removesuffix(".trace")
