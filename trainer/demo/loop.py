"""`train(cfg)`: the whole run, from a validated `TrainConfig` to `logs/<run>/`.

1. environment (device, dtype, seed, process-global knobs, process group: `train`), 2. data (`_train`),
3. model with its elementwise ops injected, optimizer and step (`_build`), 4. the run directory, run.json, the
event writer and the profiler (`_start`), 5. the loop (`_loop`): each step inside record_function ranges, a step
clock, `prof.step()`, scalars at the logging cadence (`Meter`), evaluation each epoch, 6. the end
(trainer/demo/finish.py): run.json, and for profiled runs the top-ops table, the TensorBoard command and the
diagnosis.

With --profile the loop profiles as a user's loop does (capture/profiler.py): `stepscope.schedule` with the
trainer's schedule arguments, `stepscope.trace_handler` and its cycle worker, each step's wait for data and input
copy reported to the schedule as stepscope.loader and stepscope.input_copy would; plus the trainer's extras.

Host-device sync points in the loop, all at the logging cadence or the epoch end: `StepClock.drain`
(waits for the last step boundary), the loss read-back, and the eval accuracy read-back; with --profile also
stepscope.schedule's, at the edges of its windows of unprofiled steps (capture/schedule.py).

Under torchrun (see trainer/demo/distributed.py) the loss is all-reduced at the logging cadence; after Ctrl-C or
SIGTERM no rank starts another collective: the last logged loss is then the rank's own.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field

import torch
from stepscope.capture.memory_stats import MemoryWindows
from stepscope.capture.oom import OomCapture, is_oom
from stepscope.capture.phases import Phases
from stepscope.capture.profiler import NullProfiler, Profiler, build_profiler, worker_name
from stepscope.demo.config import TrainConfig
from stepscope.demo.data import build_data
from stepscope.demo.distributed import all_reduce_sum, make_distributed
from stepscope.demo.env import Env, configure_process, make_env, seed_everything
from stepscope.demo.finish import RunParts, finish_run, reserve_bytes
from stepscope.demo.models import build_model
from stepscope.demo.optim import build_optimizer, loss_fn
from stepscope.demo.run_dir import (
    NoSpace,
    create_run_dir,
    environment_info,
    git_sha,
    no_space,
    release_space,
    reserve_space,
)
from stepscope.demo.run_record import RunRecord
from stepscope.demo.step import build_step, capture_stream, on_stream
from stepscope.demo.tb_log import config_markdown, run_log
from stepscope.demo.timing import StepClock, Throughput
from tqdm import tqdm

WARMUP_STEPS = 10  # at most; never more than a tenth of the run
PLAIN_EVERY_S = 5.0  # without a terminal (a log file, CI) tqdm draws nothing: a plain line this often instead


@dataclass
class Progress:
    """What the run has reached; written to run.json whether it completes or not."""

    steps: int = 0
    train_loss: float = math.nan
    eval_accuracy: float = math.nan
    history: list = field(default_factory=list)  # (step, loss) at each logging point


class PlainProgress:
    """A progress line on stderr at most every ``every_s`` seconds and at the last step, for a run whose stderr
    is not a terminal (where tqdm's bar is off): ``step 40/100, loss 1.234, 408 images/s``."""

    def __init__(self, total: int, on: bool, every_s: float = PLAIN_EVERY_S, clock=time.monotonic) -> None:
        self.total, self.on, self.every_s, self.clock = total, on, every_s, clock
        self.last = clock()

    def update(self, step: int, progress: Progress, thr: Throughput) -> None:
        if not self.on:
            return
        now = self.clock()
        if now - self.last < self.every_s and step != self.total:
            return
        self.last = now
        loss = "" if math.isnan(progress.train_loss) else f", loss {progress.train_loss:.3f}"
        speed = f", {thr.images_per_s:.0f} images/s" if thr.steps else ""
        print(f"step {step}/{self.total}{loss}{speed}", file=sys.stderr, flush=True)


def step_kind(cfg: TrainConfig) -> str:
    return "cuda-graphs" if cfg.cuda_graphs else "compile" if cfg.compile else "eager"


@torch.no_grad()
def evaluate(model: torch.nn.Module, data, env: Env) -> float:
    model.eval()
    correct = torch.zeros((), device=env.device, dtype=torch.long)
    total = 0
    for x, y in data.eval_batches():
        with env.autocast():
            correct += (model(x).argmax(1) == y).sum()
        total += len(y)
    model.train()
    return correct.item() / max(1, total)  # sync point: once per epoch


def train(cfg: TrainConfig) -> int:
    """Run training; returns the process exit code (0, or 130/143 after SIGINT/SIGTERM). A full disk under
    --logdir raises `NoSpace` (one line, exit code 2) after run.json says "failed", if it still fits."""
    env = make_env(cfg.device, cfg.bf16, cfg.channels_last)
    configure_process(env, profiling=cfg.profile.enabled, cuda_graphs=cfg.cuda_graphs, compile_mode=cfg.compile,
                      wait=cfg.profile.wait, repeat=cfg.profile.repeat)
    group = make_distributed(env)
    code = None
    try:
        # the step, and with --cuda-graphs its graph, is freed when _train returns: destroying the process group
        # while a graph that holds NCCL collectives is alive hangs (tests/ddp_graph_worker.py)
        code = _train(cfg, env, group)
        return code
    except OSError as e:
        if no_space(e):
            raise NoSpace(e) from None
        raise
    finally:
        group.shutdown(clean=code == 0)


@dataclass
class Built:
    """What the run trains: the data, the model (and the one evaluated: not the DDP/compiled wrapper), the
    optimizer and its LR schedule, the step's named phases, the host batches and the step."""

    data: object
    model: torch.nn.Module
    eval_model: torch.nn.Module
    opt: torch.optim.Optimizer
    lr_sched: object
    phases: Phases
    host_batches: object
    step: object


@dataclass
class Started:
    """The run on disk: its directory, event writer, run.json record, and the profiler writing beside them."""

    run_dir: object
    log: object
    record: RunRecord
    prof: Profiler | NullProfiler


class Meter:
    """The run's measurements as the loop runs: the step clock and throughput, the allocator's counters at each
    log window's edge, progress, and the scalars written at the logging cadence."""

    def __init__(self, cfg: TrainConfig, env: Env, built: Built, started: Started) -> None:
        self.env, self.built, self.log = env, built, started.log
        self.progress = Progress()
        self.clock = StepClock(env.device, schedule=getattr(started.prof, "schedule", None))
        self.thr = Throughput(cfg.data.batch_size * env.world_size)
        self.memory = MemoryWindows()  # the allocator's counters at each log window's edge (after its sync point)
        memory = self.memory
        self.oom = OomCapture(started.run_dir, f"rank{env.rank}", telemetry=lambda: {
            **memory.telemetry(windows=len(memory.edges)), "windows": [{"step": s, **r} for s, r in memory.edges]})
        self.bar = tqdm(total=cfg.steps, disable=None if env.is_main else True, unit="step", file=sys.stderr)
        self.plain = PlainProgress(cfg.steps, on=env.is_main and self.bar.disable)

    def log_window(self, across_ranks: bool = True) -> None:
        env, progress, thr, memory = self.env, self.progress, self.thr, self.memory
        times = self.clock.drain()  # sync point: waits for the last step boundary
        thr.add(times)
        memory.edge(progress.steps, closing=True)  # the window's peaks and counters; its peaks reset
        thr.memory = memory.telemetry(windows=len(memory.edges))
        loss_sum, count = self.built.step.take_loss()
        if count:
            loss = all_reduce_sum(loss_sum) / env.world_size if across_ranks else loss_sum
            progress.train_loss = loss.item() / count  # sync point: loss read-back
        progress.history.append((progress.steps, progress.train_loss))
        kept = [t.ms for t in times if not t.excluded]
        scalars = {"train/loss": progress.train_loss, "train/lr": self.built.lr_sched.get_last_lr()[0]}
        if kept:
            window_ms = sum(kept) / len(kept)
            scalars["perf/step_ms"] = window_ms
            scalars["perf/images_per_s"] = thr.batch_size / (window_ms / 1e3)
        if env.is_cuda:
            scalars["perf/peak_cuda_mem_mb"] = memory.run_peak_allocated / 2**20  # the run's, as before the resets
            if memory.edges:
                window = memory.edges[-1][1]
                scalars["perf/window_peak_reserved_mb"] = window["peak_reserved"] / 2**20
                scalars["perf/alloc_retries"] = float(window["retries"])
        self.log.scalars(scalars, progress.steps)
        self.bar.set_postfix(loss=f"{progress.train_loss:.3f}", img_s=f"{thr.images_per_s:.0f}")


def _train(cfg: TrainConfig, env: Env, group) -> int:
    stop = group.stop_signal()
    stop.install()
    seed_everything(cfg.seed)
    try:
        data = build_data(cfg.data, env, cfg.model.num_classes, cfg.seed)  # a download stops at once on Ctrl-C
    except KeyboardInterrupt:
        print(f"\n{stop.signal_name} before the first step; nothing was written", file=sys.stderr)
        return stop.exit_code()
    # from here until the loop, a signal takes effect once run.json exists, so that it always says "interrupted"
    stop.hold()
    built = _build(cfg, env, group, data)
    started = _start(cfg, env, group, stop)
    meter = Meter(cfg, env, built, started)
    status, failure = _loop(cfg, env, built, started, meter, stop)
    code = finish_run(status, meter.progress, meter.thr, started.record,
                      RunParts(env, group, stop, started.log, started.prof.handler))
    if failure is not None:
        raise failure
    return code


def _build(cfg: TrainConfig, env: Env, group, data) -> Built:
    """The model with its elementwise ops, wrapped for DDP or compiled, its optimizer, and the step."""
    model = build_model(cfg.model).to(env.device, memory_format=env.memory_format)
    eval_model = model
    stream = capture_stream(env, cfg.cuda_graphs)
    with on_stream(stream):
        model = group.wrap(model, cfg.compile)
    opt, lr_sched = build_optimizer(cfg.optim, model, env.device, cfg.data.batch_size * env.world_size, cfg.steps)
    phases = Phases(cfg.run.nvtx)
    host_batches = data.host_batches()
    sample = data.to_device(next(host_batches)) if cfg.cuda_graphs else None
    step = build_step(step_kind(cfg), model, opt, loss_fn(cfg.optim.label_smoothing), env, phases,
                      sample=sample, compile_mode=cfg.compile, stream=stream,
                      graph_warmup_iters=group.graph_warmup_iters)
    return Built(data, model, eval_model, opt, lr_sched, phases, host_batches, step)


def _start(cfg: TrainConfig, env: Env, group, stop) -> Started:
    """The run directory (every rank's worker named in it), the event writer with the configuration, the
    profiler (with --profile), and run.json saying "running", with room set aside for its last update."""
    tag = f"{cfg.model.arch}-{cfg.model.ops}-{step_kind(cfg)}"
    start = group.start_run(lambda: create_run_dir(cfg.run.logdir, cfg.run.run_name, tag), worker_name(env.rank))
    run_dir = start.run_dir
    log = run_log(run_dir, env.is_main)
    log.text("config", config_markdown(cfg.to_dict()))
    prof: Profiler | NullProfiler = NullProfiler()
    if cfg.profile.enabled:
        prof = build_profiler(cfg.profile, run_dir, worker_name(env.rank), env.device, start.span_base, log=log,
                              guard=stop.deferred)
    record = RunRecord(
        config=cfg.to_dict(), environment=environment_info(env.device), git_sha=git_sha(),
        world_size=env.world_size, global_batch_size=cfg.data.batch_size * env.world_size,
        distributed={"backend": group.backend, "workers": list(start.workers), "ddp": group.options},
        step_kind=step_kind(cfg), run_dir=str(run_dir))
    if env.is_main:
        record.write(run_dir)
        reserve_space(run_dir, reserve_bytes(record))
    return Started(run_dir, log, record, prof)


def _loop(cfg: TrainConfig, env: Env, built: Built, started: Started, meter: Meter, stop) -> tuple[str, BaseException | None]:
    """The training steps until the last, a stop signal or an error: ("completed" | "interrupted" | "failed",
    the full-disk error to raise once run.json says "failed"). Any other error is raised (after an OOM's
    capture), with run.json left "running"."""
    prof, clock, progress, data, step = started.prof, meter.clock, meter.progress, built.data, built.step
    # torch.compile, cuDNN autotuning and the allocator's growth land in the first steps
    warmup_steps = min(WARMUP_STEPS, max(1, cfg.steps // 10))

    def excluded(i: int) -> bool:
        # the step after step i counts towards throughput unless it is warm-up or profiled, or the trace
        # handler's thread works on a cycle meanwhile (its Python code takes turns with the loop's)
        return i < warmup_steps or prof.is_tracing() or prof.observer_busy()

    status, failure = "interrupted", None
    try:
        stop.release()
        with prof:
            clock.mark(excluded=True)  # step 1 is always warm-up
            for i in range(1, cfg.steps + 1):
                clock.begin()
                with built.phases("data"):
                    batch = next(built.host_batches)
                clock.batch_ready()
                with built.phases("copy"):
                    x, y = clock.copy(lambda b=batch: data.to_device(b))
                step(x, y)
                built.lr_sched.step()
                clock.dispatched()
                prof.step()  # a trace being written is finished before a signal takes effect
                clock.mark(excluded=excluded(i))
                progress.steps = i
                meter.bar.update(1)
                if i % cfg.run.log_every == 0 or i == cfg.steps:
                    meter.log_window()
                meter.plain.update(i, progress, meter.thr)
                if i % data.steps_per_epoch == 0 or i == cfg.steps:
                    clock.exclude_since_last_mark()  # evaluation is not a training step
                    progress.eval_accuracy = evaluate(built.eval_model, data, env)
                    clock.mark(excluded=excluded(i))
                    started.log.scalars({"eval/accuracy": progress.eval_accuracy}, i)
        prof.close()  # the cycle worker's last diagnoses, before the run's own
        status = "completed"
    except BaseException as e:
        if no_space(e):  # a full disk: record what the run reached if run.json still fits, then fail
            status, failure = "failed", e
        elif not stop.explains(e):
            if is_oom(e):  # what was live, written under run_dir/oom/ before the error goes on unchanged
                meter.oom.capture(e)
            release_space(started.run_dir)  # a crash: run.json stays "running", with the traceback on stderr
            raise
        else:
            who = f"rank {env.rank}: " if env.world_size > 1 else ""
            if not isinstance(e, KeyboardInterrupt):
                print(f"\n{who}after the stop request: {type(e).__name__}: {str(e).splitlines()[0]}", file=sys.stderr)
            print(f"\n{who}interrupted at step {progress.steps} ({stop.signal_name}); flushing what the run has",
                  file=sys.stderr)
            if progress.steps:
                meter.log_window(across_ranks=False)  # a peer may have stopped already: no more collectives
        prof.close()  # the cycles written so far are diagnosed (a repeated signal is ignored from now on)
    finally:
        meter.bar.close()
    return status, failure
