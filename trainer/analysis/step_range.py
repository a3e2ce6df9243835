"""The unprofiled step of a trace from elsewhere (no telemetry) as a range, from the overhead model's measured
error, and the verdict at either end of it. Torch-free.

    band = error_band(trace, rec)        # Band(style="hf", with_stack=True, low=0.97, high=15.41)
    rng = step_range(profiled_bd, view.breakdown, band, gpu, loader_paced)
    rng.low_ms, rng.high_ms, rng.alternative          # alternative: None, or the verdict at the other end

The overhead model (overhead.py) takes the profiler's modelled host cost off the profiled step. Against the
same steps timed unprofiled on an H100 (CUDA events at every step boundary, median step; torch 2.11.0+cu130,
2026-11-25), the measured step was this many times the estimate (measured / estimated), by the loop style
read from the trace and whether it was recorded with with_stack:

    style      with_stack  runs  measured / estimated
    eager      no          32    0.57-1.16
    eager      yes         12    0.33-1.90 (plus the 20 eager runs of tests/data/suite and holdout: 0.68-1.33)
    compiled   no           4    0.58-0.79
    compiled   yes          4    0.31-1.08 (plus the suite's two torch.compile runs: 0.83 and 1.26)
    lightning  no          12    0.55-0.85
    lightning  yes          8    1.07-24.87 (plus the suite's Lightning ResNet-18: 1.63)
    hf         yes          8    1.02-14.67

The 80 rows (families mlp, gru, transformer, resnet18; loops eager, compiled, Lightning's Trainer and Hugging
Face's Trainer; recordings none, shapes, memory, stacks, all) are tests/data/calibration/h100_2026-11-25.json,
from ``scripts/calibrate_overhead.py`` run one loop style per command,

    CAL_STYLES=eager bash scripts/gpu_verify.sh OUT calibrate      # then compiled, lightning, hf

(``--table`` joins them). The suite's runs are tests/data/suite and tests/data/holdout with their truth.json.
How each loop reads (``loop_style``):
- Lightning's Trainer by its profiler's ranges (``[Strategy]...``), recorded with or without with_stack.
- Hugging Face's Trainer by its Python frames, those of transformers/trainer.py (``_inner_training_loop``
  spans the recorded window, ``training_step`` each step), among the few long frames whose names the parse
  keeps (ParsedTrace.long_frames: no pass of its own over the events). Without with_stack the trace holds
  nothing of that Trainer's own (its DataLoader and optimizer ranges are torch's, as in any loop), so it
  reads as eager, and the 12 Hugging Face rows without with_stack count as eager. A Hugging Face model in a
  loop of one's own is eager.
- A torch.compile'd loop as compiled only where it was recorded with record_shapes (inductor's
  "## Call CompiledFxGraph" ranges are recorded only then); the other compiled rows count as eager.
With with_stack, framework-heavy loops (Lightning's and Hugging Face's Trainer) run many Python functions
per step whose recorded cost the model takes off in full, though much of that cost is the profiler's own: it
over-subtracts, and the true step was up to 25x its estimate (a small MLP under Lightning: 0.12 ms estimated,
2.83 measured, 6.63 profiled; under Hugging Face's: 0.22 estimated, 3.18 measured, 6.38 profiled). Plain
loops measured 0.33-1.90 times their estimate. A loop of another framework, which reads as eager, may
over-subtract as these two do, and its true step then lie above its range.

BANDS holds those extremes widened by 5%: the true step is taken to lie within [low x estimate, high x
estimate], never below the GPU's own time per step and never above the profiled step (x PROFILED_MARGIN): the
profiler does not make a step faster. Every measured step of the 80 rows was below its profiled step (at most
0.93 of it); one suite run, a pageable copy staged by the host, measured 1.04 of it, hence the margin. The
point estimate is the model's, unchanged (in Lightning loops recorded with with_stack it lies below the range:
every such step measured longer than estimated; in Hugging Face's too, all but the GRU's two by 2x or
more).

Where the verdict at the low end differs from the one at the high end, the trace alone cannot decide: the
other verdict is the ``alternative``, and the change that settles it is to profile with ``stepscope.schedule``
in place of ``torch.profiler.schedule``, which times the unprofiled steps (the analysis then needs no model).
"""

from __future__ import annotations

from dataclasses import dataclass

from stepscope.analysis.breakdown import Breakdown
from stepscope.analysis.events import ParsedTrace
from stepscope.analysis.findings import verdict
from stepscope.analysis.overhead import Recording
from stepscope.analysis.unprofiled import rebuild
from stepscope.analysis.vocabulary import DATA
from stepscope.trace.sources import COMPILED_LOOP as COMPILED  # the loop styles of trace/sources.py
from stepscope.trace.sources import EAGER, loop_source
from stepscope.trace.sources import HF_LOOP as HF
from stepscope.trace.sources import LIGHTNING_LOOP as LIGHTNING

# (loop style, with_stack) -> (low, high) multipliers of the estimated unprofiled step (module docstring)
# (no HF without with_stack: such a trace reads as eager)
BANDS = {
    (EAGER, True): (0.31, 2.00),
    (EAGER, False): (0.54, 1.23),
    (COMPILED, True): (0.29, 1.33),
    (COMPILED, False): (0.55, 0.83),
    (LIGHTNING, True): (1.01, 26.12),
    (LIGHTNING, False): (0.51, 0.89),
    (HF, True): (0.97, 15.41),
}
PROFILED_MARGIN = 1.05  # the unprofiled step is at most the profiled step times this (module docstring)
SETTLE = ("profile with stepscope.schedule(wait=..., warmup=..., active=...) in place of torch.profiler.schedule: "
          "it times the steps that the profiler does not record")


@dataclass(frozen=True)
class Band:
    style: str  # EAGER | LIGHTNING | HF | COMPILED
    with_stack: bool
    low: float  # measured / estimated step, at least
    high: float  # ... and at most

    @property
    def label(self) -> str:
        loops = "Hugging Face Trainer" if self.style == HF else self.style
        return f"{loops} loops recorded {'with' if self.with_stack else 'without'} with_stack"


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
    """The loop style of the first trace source whose marks the trace holds (trace/sources.py: Lightning's
    profiler ranges, Hugging Face's Trainer's long Python frames, with_stack only, a torch.compile'd
    model's graph ranges), else eager."""
    source = loop_source({a.name for a in trace.annotations}, trace.long_frames)
    return source.style if source is not None else EAGER


def error_band(trace: ParsedTrace, rec: Recording) -> Band:
    return error_band_for(loop_style(trace), rec.with_stack)


def error_band_for(style: str, with_stack: bool) -> Band:
    low, high = BANDS[(style, with_stack)]
    return Band(style, with_stack, low, high)


def step_range(profiled: Breakdown, estimate: Breakdown, band: Band, gpu: bool, loader_paced: bool) -> StepRange:
    """The unprofiled step's range around ``estimate`` (the model's unprofiled breakdown) and the verdicts at
    its ends; ``profiled`` is the trace's own breakdown, which the ends are rebuilt from (unprofiled.rebuild:
    never shorter than the GPU path) and whose step caps them (never longer than the profiled step, with
    PROFILED_MARGIN)."""
    step = estimate.total_us / estimate.steps / 1e3
    data = estimate.ms_per_step(DATA)
    cap = profiled.total_us / profiled.steps / 1e3 * PROFILED_MARGIN
    # the model's error is the host's: the wait for data, host work like any other, is scaled with the step
    factors = [min(f, cap / step) if step > 0 else f for f in (band.low, band.high)]
    ends = [rebuild(profiled, step * f, data * f, measured=False) for f in factors]
    low_v, high_v = (verdict(b, gpu, loader_paced) for b in ends)
    point = verdict(estimate, gpu, loader_paced)
    # the verdict at an end of the range that differs from the point's (the high end's first: the model's
    # largest measured errors left the step longer than it estimated)
    alternative = next((v for v in (high_v, low_v) if v != point), None)
    low_ms, high_ms = (b.total_us / b.steps / 1e3 for b in ends)
    return StepRange(low_ms, high_ms, low_v, high_v, alternative, band)
