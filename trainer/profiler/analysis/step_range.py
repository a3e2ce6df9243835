"""The unprofiled step of a trace from elsewhere (no telemetry) as a range, from the overhead model's measured
error, and the verdict at either end of it. Torch-free.

    band = error_band(trace, rec)        # Band(style="eager", low=0.5, high=1.35, basis="...")
    rng = step_range(profiled_bd, view.breakdown, band, gpu, loader_paced)
    rng.low_ms, rng.high_ms, rng.alternative          # alternative: None, or the verdict at the other end

The overhead model (overhead.py) takes the profiler's modelled host cost off the profiled step. Against the
same steps timed unprofiled on an H100 (CUDA events around a few hundred steps; torch 2.11), the measured
step was this many times the estimate (measured / estimated):

    eager loops recorded with with_stack (the suite and held-out families, 23 runs in tests/data/suite and
    tests/data/holdout with truth.json, worker-fed loaders that fall behind left out: the analysis names
    those apart): 0.68 (ViT-tiny batch 8) to 1.33 (per-step host Python), most within 0.83-1.26; Hugging Face
    GPT-2 and BERT 1.00 and 1.23, the two torch.compile runs 0.83 and 1.26;
    plain torch.profiler loops recorded without with_stack: launch-bound loops 0.51 (TransformerEncoder
    batch 2: 19.3 ms estimated, 9.9 measured), 0.59 (DLRM), 0.60 (GRU cell loop), 0.66 (LSTM small); eager
    ResNet-18 batch 128, 1.28 (5.86 ms estimated, 7.51 measured);
    Lightning loops: 1.63 (ResNet-18 recorded with with_stack, suite) and 3.54 (ResNet-18 batch 64 under
    Lightning's PyTorchProfiler: 3.76 ms estimated, 13.3 measured; Lightning's hooks, logging and
    progress bar run between the recorded ranges, and the model does not see them).

BANDS holds those extremes, widened a little (a handful of runs per style): the true step is taken to lie
within [low x estimate, high x estimate], and never below the GPU's own time per step. The point estimate is
the model's, unchanged. ``scripts/calibrate_overhead.py`` re-measures the table on a GPU per recording
option and loop style.

Where the verdict at the low end differs from the one at the high end, the trace alone cannot decide: the
other verdict is the ``alternative``, and the change that settles it is to profile with ``stepscope.schedule``
in place of ``torch.profiler.schedule``, which times the unprofiled steps (the analysis then needs no model).
"""

from __future__ import annotations

from dataclasses import dataclass

from .breakdown import Breakdown
from .events import ParsedTrace
from .findings import verdict
from .overhead import Recording
from .unprofiled import rebuild

EAGER, LIGHTNING, COMPILED = "eager", "lightning", "compiled"
# (loop style, with_stack) -> (low, high) multipliers of the estimated unprofiled step (module docstring)
BANDS = {
    (EAGER, True): (0.65, 1.35),
    (EAGER, False): (0.5, 1.35),
    (COMPILED, True): (0.65, 1.35),
    (COMPILED, False): (0.5, 1.35),
    (LIGHTNING, True): (0.6, 3.6),
    (LIGHTNING, False): (0.6, 3.6),
}
LIGHTNING_MARKS = ("[pl][profile]", "[Strategy]", "[LightningModule]", "[Callback]", "[_TrainingEpochLoop]")
COMPILED_MARK = "CompiledFxGraph"  # inductor's "## Call CompiledFxGraph <hash> ##" range around each graph
SETTLE = ("profile with stepscope.schedule(wait=..., warmup=..., active=...) in place of torch.profiler.schedule: "
          "it times the steps that the profiler does not record")


@dataclass(frozen=True)
class Band:
    style: str  # EAGER | LIGHTNING | COMPILED
    with_stack: bool
    low: float  # measured / estimated step, at least
    high: float  # ... and at most

    @property
    def label(self) -> str:
        return f"{self.style} loops recorded {'with' if self.with_stack else 'without'} with_stack"


@dataclass(frozen=True)
class StepRange:
    low_ms: float
    high_ms: float
    low_verdict: str
    high_verdict: str
    alternative: str | None  # the verdict at an end of the range where it differs from the point verdict
    band: Band

    def to_dict(self) -> dict:
        return {"step_ms": [round(self.low_ms, 4), round(self.high_ms, 4)],
                "verdicts": [self.low_verdict, self.high_verdict], "loop_style": self.band.style,
                "band": [self.band.low, self.band.high]}

    def line(self, point_verdict: str) -> str:
        """One line: the range and, where it crosses a verdict boundary, what settles it."""
        text = (f"without the profiler the step is {self.low_ms:.2f}-{self.high_ms:.2f} ms (the overhead model's "
                f"measured error on {self.band.label})")
        if self.alternative is None:
            return text + f"; {point_verdict} at both ends"
        return (text + f": {self.low_verdict} at the low end, {self.high_verdict} at the high end, so the trace "
                f"alone cannot decide between {point_verdict} and {self.alternative}; to settle it, {SETTLE}")


def loop_style(trace: ParsedTrace) -> str:
    """Lightning's loop (its profiler's ranges), a torch.compile'd model (compiled graphs' ranges), else eager."""
    names = {a.name for a in trace.annotations}
    if any(n.startswith(LIGHTNING_MARKS) for n in names):
        return LIGHTNING
    if any(COMPILED_MARK in n for n in names):
        return COMPILED
    return EAGER


def error_band(trace: ParsedTrace, rec: Recording) -> Band:
    style = loop_style(trace)
    low, high = BANDS[(style, rec.with_stack)]
    return Band(style, rec.with_stack, low, high)


def step_range(profiled: Breakdown, estimate: Breakdown, band: Band, gpu: bool, loader_paced: bool) -> StepRange:
    """The unprofiled step's range around ``estimate`` (the model's unprofiled breakdown) and the verdicts at
    its ends; ``profiled`` is the trace's own breakdown, which the ends are rebuilt from (unprofiled.rebuild:
    never shorter than the GPU path)."""
    step = estimate.total_us / estimate.steps / 1e3
    data = estimate.ms_per_step("data")
    # the model's error is the host's: the wait for data, host work like any other, is scaled with the step
    ends = [rebuild(profiled, step * f, data * f, measured=False) for f in (band.low, band.high)]
    low_v, high_v = (verdict(b, gpu, loader_paced) for b in ends)
    point = verdict(estimate, gpu, loader_paced)
    # the verdict at an end of the range that differs from the point's (the high end's first: the model's
    # largest measured errors left the step longer than it estimated)
    alternative = next((v for v in (high_v, low_v) if v != point), None)
    low_ms, high_ms = (b.total_us / b.steps / 1e3 for b in ends)
    return StepRange(low_ms, high_ms, low_v, high_v, alternative, band)
