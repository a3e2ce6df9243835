"""The export of a large uncompressed trace: read and written in two byte ranges at once (a forked helper
takes the second), with the plugin check's excerpt written in the same pass. Both must give, byte for byte,
what the one-range export and ``excerpt.excerpt`` give; these tests make small traces take those paths.

    python -m pytest -q tests/test_tbfix_ranges.py
"""

from __future__ import annotations

import gc
import gzip
import json
import os
from pathlib import Path

import pytest
from few_by_default import few_by_default
from reference.dict_rewrite import adapt_trace
from stepscope.plugin_copy import (
    plan_columns,
    plugin_check,
    stream_plan,
)
from stepscope.plugin_copy.excerpt import excerpt
from stepscope.plugin_copy.export import export_file
from stepscope.trace import fastread
from stepscope.trace import workers as policy
from stepscope.trace.discover import discover
from stepscope.trace.files import load_trace
from stepscope.trace.gc_paused import gc_paused
from stepscope.trace.workers import Workers

DATA = Path(__file__).parent / "data"
SPAN = "1795259109156023363"
LOCAL = Workers.local(cpus=2)  # the command line's policy on a machine of two CPUs or more


def _plain(tmp_path: Path, run: str, junk: bool = False) -> tuple[Path, dict]:
    """An uncompressed copy of a tests/data trace; ``junk``: with entries the export must leave out or
    guard (not objects, a nameless event) in both halves of the file."""
    tf = discover(DATA / run).traces[0]
    trace = load_trace(tf.path)
    if junk:
        events = trace["traceEvents"]
        half = len(events) // 2
        events[half + 7:half + 7] = ["junk", 7, {"ph": "X", "cat": "cpu_op", "ts": events[half]["ts"], "dur": 1}]
        events[3:3] = [None, {"ph": "i", "ts": events[0].get("ts", 0)}]
    path = tmp_path / f"{run}.{SPAN}.pt.trace.json"
    path.write_text(json.dumps(trace))
    return path, trace


def _export(src: Path, out: Path, split: bool, monkeypatch, gz: bool = False) -> tuple[Path, Path]:
    with monkeypatch.context() as m:
        m.setattr(policy, "SPLIT_FROM", 0 if split else 1 << 62)
        m.setattr(stream_plan, "SPLIT_EVENTS", 0 if split else 1 << 62)
        adapted, _ = export_file(out, "w", SPAN, src, gz=gz, excerpt=out / "excerpt.json", workers=LOCAL)
    return adapted, out / "excerpt.json"


@pytest.fixture(scope="module")
def eager_junk(tmp_path_factory) -> tuple[Path, bytes]:
    """eager_bs128 with junk (``_plain``), uncompressed, and its copy exported in one range: made once for the
    tests that split the same file (they only read both)."""
    tmp = tmp_path_factory.mktemp("eager_junk")
    src, _ = _plain(tmp, "eager_bs128", junk=True)
    one, _ = _export(src, tmp / "one", False, pytest.MonkeyPatch)
    return src, one.read_bytes()


# a CUDA graph and a rank of an NCCL run by default; the eager and Lightning runs take the same path (slow)
@pytest.mark.parametrize("run", few_by_default(["cuda_graph", "eager_bs128", "nccl_ddp", "lightning_h100"],
                                               keep=["cuda_graph", "nccl_ddp"]))
def test_two_ranges_write_the_same_copy_as_one(run, tmp_path, monkeypatch):
    src, trace = _plain(tmp_path, run, junk=run == "cuda_graph")
    if run == "nccl_ddp":  # a gzipped original: the second range decompresses the bytes before it (gzopen.py)
        src = src.rename(src.with_name(src.name + ".gz"))
        src.write_bytes(gzip.compress(src.read_bytes()))
    assert plan_columns.export_ranges(src, LOCAL) is None  # small: one range unless told otherwise
    monkeypatch.setattr(policy, "SPLIT_FROM", 0)
    assert len(plan_columns.export_ranges(src, LOCAL).ranges) == 2
    assert plan_columns.export_ranges(src, Workers.inline()) is None  # a training process: never in halves
    one, _ = _export(src, tmp_path / "one", False, monkeypatch)
    two, _ = _export(src, tmp_path / "two", True, monkeypatch)
    assert two.read_bytes() == one.read_bytes()
    assert load_trace(two) == json.loads(json.dumps(adapt_trace(trace)))
    zipped, _ = _export(src, tmp_path / "gz", True, monkeypatch, gz=True)  # two gzip members, one stream
    assert gzip.decompress(zipped.read_bytes()) == one.read_bytes()
    assert len(plan_columns.export_ranges(zipped, LOCAL).ranges) == 2  # two gzip members, read through an index
    again, _ = _export(zipped, tmp_path / "again", True, monkeypatch)
    assert again.read_bytes() == _export(zipped, tmp_path / "again1", False, monkeypatch)[0].read_bytes()


def test_the_plan_of_two_ranges_is_the_plan_of_one(eager_junk, monkeypatch):
    src, _ = eager_junk
    monkeypatch.setattr(policy, "SPLIT_FROM", 0)
    monkeypatch.setattr(stream_plan, "SPLIT_EVENTS", 0)
    one, _ = stream_plan.plan_edits(src)  # a training process's call: no helpers, whatever the size
    two, _ = stream_plan.plan_edits(src, LOCAL)
    assert one.ranges is None and [index for _, index in two.ranges][0] == 0 and len(two.ranges) == 2
    (first, _), (second, _) = two.ranges  # as each half's reader found the cut: the same event for both
    assert first[0] == 0 and first[1] == second[0] and second[1] is None
    with open(src, "rb") as f:
        assert f.read()[second[0] - 3:second[0] + 1].replace(b" ", b"").endswith(b"},{")
    assert two.edits == one.edits and two.step_starts == one.step_starts
    assert (two.keep == one.keep).all() and ((two.ts == one.ts) | (two.ts != two.ts)).all()


@pytest.mark.parametrize("split", [False, True])
def test_the_excerpt_written_with_the_copy_is_the_excerpt_of_the_copy(split, tmp_path, monkeypatch):
    src, _ = _plain(tmp_path, "lightning_h100")
    monkeypatch.setattr(plugin_check, "WHOLE_UP_TO", 0)  # export_file writes one above half of this
    monkeypatch.setattr(plugin_check, "EXCERPT_STEPS", 2)  # of the trace's 3 steps
    adapted, part = _export(src, tmp_path / "out", split, monkeypatch)
    assert part.is_file()
    assert part.read_bytes() == excerpt(adapted, tmp_path / "made.json", plugin_check.EXCERPT_STEPS).read_bytes()
    assert plugin_check.plugin_problem(adapted, excerpt_path=part) is None


def test_no_excerpt_for_a_trace_of_few_steps_or_a_small_one(tmp_path, monkeypatch):
    src, trace = _plain(tmp_path, "cuda_graph")
    steps = [e for e in trace["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
    _, part = _export(src, tmp_path / "small", False, monkeypatch)
    assert not part.exists()  # not larger than half of WHOLE_UP_TO: the check loads the copy itself
    monkeypatch.setattr(plugin_check, "WHOLE_UP_TO", 0)
    monkeypatch.setattr(plugin_check, "EXCERPT_STEPS", len(steps))
    _, part = _export(src, tmp_path / "short", False, monkeypatch)
    assert not part.exists()  # no more steps than the excerpt would keep: the copy is its own excerpt


@pytest.fixture(params=[False, True], ids=["cached", "direct"])
def direct(request, monkeypatch):
    """The copy written through the page cache, or around it (trace/direct_file.py) in buffers small enough
    that the copy fills many."""
    from stepscope.plugin_copy import stream_write
    from stepscope.trace import direct_file

    if request.param:
        monkeypatch.setattr(stream_write, "DIRECT_FROM", 0)
        monkeypatch.setattr(direct_file, "BUFFER", 4 * direct_file.BLOCK)
    return request.param


# the helper of read_columns, of the call stacks (only where they are swept in Python), of the writing
@pytest.mark.parametrize("refused", [1, 2, 3])
def test_a_helper_that_cannot_start_leaves_the_work_to_this_process(refused, eager_junk, tmp_path, monkeypatch,
                                                                     direct):
    if refused == 3 and fastread.available():
        pytest.skip("the compiled reader sweeps the call stacks without a helper: two helpers, both refused above")
    src, one = eager_junk
    calls = []
    fork_pool = policy.fork_pool

    def refuse(processes):
        calls.append(processes)
        if len(calls) == refused:
            raise RuntimeError("can't start new thread")
        return fork_pool(processes)

    monkeypatch.setattr(policy, "fork_pool", refuse)
    two, _ = _export(src, tmp_path / "two", True, monkeypatch)
    assert two.read_bytes() == one
    assert not [p for p in (tmp_path / "two").iterdir() if p.name.startswith(".tmp-")]  # no part left behind
    assert len(calls) >= refused


def test_without_helpers_nothing_is_forked(tmp_path, monkeypatch):
    """The trainer exports from the training process, which must never fork (its threads and CUDA context)."""
    src, trace = _plain(tmp_path, "eager_bs128")

    def no_fork(*args):
        raise AssertionError("forked a helper")

    monkeypatch.setattr(policy, "fork_pool", no_fork)
    monkeypatch.setattr(policy, "SPLIT_FROM", 0)
    monkeypatch.setattr(stream_plan, "SPLIT_EVENTS", 0)
    adapted, _ = export_file(tmp_path / "out", "w", SPAN, src)
    assert load_trace(adapted) == json.loads(json.dumps(adapt_trace(trace)))


@pytest.mark.parametrize("workers", [LOCAL, Workers.inline()])
def test_a_helper_runs_a_call_on_what_this_process_holds(workers):
    columns = list(range(100_000))
    with workers.beside(sum, columns) as result:
        assert result.result() == sum(columns)
    with workers.beside(int, "not a number") as result, pytest.raises(ValueError):
        result.result()
    calls = []
    with Workers.inline().beside(calls.append, 1) as later:  # no helper: the call is made when asked about
        assert calls == []
        assert later.done() and calls == [1]
        later.result()
        assert calls == [1]


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gz"])
@pytest.mark.parametrize("empty", ["first", "second", None])
def test_a_copy_written_in_two_ranges_joins_them_as_one_pass(eager_junk, tmp_path, monkeypatch, gz, empty,
                                                            direct):
    """The helper's range is appended as it grows, after its own ",\n" (left out where the first range wrote
    no event, and not written where the helper wrote none): the bytes of one pass, and the caller's other work
    done once, while the helper writes, before the copy appears."""
    from stepscope.plugin_copy import stream_write

    src, _ = eager_junk
    monkeypatch.setattr(policy, "SPLIT_FROM", 0)
    monkeypatch.setattr(stream_plan, "SPLIT_EVENTS", 0)
    monkeypatch.setattr(stream_write, "GROWING_POLL_S", 0.0005)  # many appends of a part of the file
    plan, header = stream_plan.plan_edits(src, LOCAL)
    (_, _), (_, second) = plan.ranges
    if empty == "first":
        plan.keep[:second] = False
    elif empty == "second":
        plan.keep[second:] = False
    name = "copy.json" + (".gz" if gz else "")
    stream_write.write_adapted_stream(src, tmp_path / "one" / name, plan, header)  # one pass, here
    seen = []
    dst = tmp_path / "two" / name
    stream_write.write_adapted_stream(src, dst, plan, header, workers=LOCAL,
                                      meanwhile=lambda: seen.append(dst.exists()))
    assert seen == [False]
    read = gzip.decompress if gz else bytes
    assert read(dst.read_bytes()) == read((tmp_path / "one" / name).read_bytes())
    assert json.loads(read(dst.read_bytes()))["traceEvents"] or empty
    assert [p.name for p in dst.parent.iterdir()] == [name]  # the helper's file is gone


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gz"])
def test_a_writing_helper_that_dies_midway_leaves_the_copy_to_this_process(eager_junk, tmp_path, monkeypatch, gz,
                                                                         direct):
    """The helper killed after writing part of its range, while this process appends it: what was written
    is dropped (the file started again from its first byte) and the copy written in one pass, byte for
    byte."""
    from stepscope.plugin_copy import stream_write

    src, _ = eager_junk
    monkeypatch.setattr(policy, "SPLIT_FROM", 0)
    monkeypatch.setattr(stream_plan, "SPLIT_EVENTS", 0)
    monkeypatch.setattr(stream_write, "GROWING_POLL_S", 0.0005)
    plan, header = stream_plan.plan_edits(src, LOCAL)
    name = "copy.json" + (".gz" if gz else "")
    stream_write.write_adapted_stream(src, tmp_path / "one" / name, plan, header)
    real = stream_write._write_range_file

    def dies(src, path, gz, plan, special, byte_range, in_excerpt):
        real(src, path, gz, plan, special, byte_range, in_excerpt)
        with open(path, "r+b") as f:  # what was written so far, then killed
            f.truncate(f.seek(0, 2) // 2)
        os._exit(9)

    monkeypatch.setattr(stream_write, "_write_range_file", dies)
    passes = []
    write_ranges = stream_write._write_ranges

    def counted(src, raw_out, *rest):
        passes.append(raw_out.tell())  # where the file stood when the pass began
        return write_ranges(src, raw_out, *rest)

    monkeypatch.setattr(stream_write, "_write_ranges", counted)
    dst = tmp_path / "two" / name
    stream_write.write_adapted_stream(src, dst, plan, header, workers=LOCAL)
    assert passes == [0, 0]  # two ranges, then one pass from the first byte
    read = gzip.decompress if gz else bytes  # a gzip member's header holds the time it was written
    assert read(dst.read_bytes()) == read((tmp_path / "one" / name).read_bytes())
    assert [p.name for p in dst.parent.iterdir()] == [name]


def test_other_work_that_fails_fails_the_copy(eager_junk, tmp_path, monkeypatch):
    from stepscope.plugin_copy import stream_write

    src, _ = eager_junk
    monkeypatch.setattr(policy, "SPLIT_FROM", 0)
    monkeypatch.setattr(stream_plan, "SPLIT_EVENTS", 0)
    plan, header = stream_plan.plan_edits(src, LOCAL)

    def full_disk():
        raise OSError(28, "No space left on device")

    for workers in (LOCAL, Workers.inline()):
        with pytest.raises(OSError, match="No space left"):
            stream_write.write_adapted_stream(src, tmp_path / "out" / "copy.json", plan, header, workers=workers,
                                              meanwhile=full_disk)
        assert not list((tmp_path / "out").iterdir())


def test_gc_paused_restores_what_it_found():
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer block still holds it
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # off before, off after
    finally:
        gc.enable()


def test_a_copy_the_plugin_runs_out_of_memory_on_is_said_as_too_large(monkeypatch):
    """The plugin holds a whole trace as Python objects: where that exhausts the memory the process may use, the
    export's one line says the trace is too large for the memory here, as the analysis would (the export's check
    may meet the limit first where the analysis' compiled reader needs less)."""
    from stepscope.plugin_copy.plugin_check import plugin_problem
    from torch_tb_profiler.profiler.data import RunProfileData

    def parse(*args, **kwargs):
        raise MemoryError()

    monkeypatch.setattr(RunProfileData, "parse", staticmethod(parse))
    trace = next((DATA / "cpu_resnet").glob("*.pt.trace.json*"))
    assert plugin_problem(trace) == "MemoryError: too large to load into the memory available here"


def test_a_growing_file_is_appended_whole(tmp_path):
    """What a helper writes while this process appends its file arrives whole and in order, the end included."""
    import threading

    from stepscope.plugin_copy import stream_write

    grown = tmp_path / "grown"
    grown.write_bytes(b"")
    chunks = [bytes([65 + k % 26]) * (1000 + 7919 * k) for k in range(40)]
    finished = threading.Event()

    def write() -> None:
        with open(grown, "ab", buffering=0) as f:
            for chunk in chunks:
                f.write(chunk)
                finished.wait(0.002)
        finished.set()

    writer = threading.Thread(target=write)
    with open(tmp_path / "out", "wb") as out:
        out.write(b"head")
        writer.start()
        stream_write._append_growing(str(grown), out, finished.is_set)
        out.write(b"tail")
    writer.join()
    assert (tmp_path / "out").read_bytes() == b"head" + b"".join(chunks) + b"tail"


@pytest.mark.parametrize("where", ["first", "second"])
def test_the_excerpt_is_handed_over_while_the_helper_writes_where_it_lies_in_the_first_range(
        where, eager_junk, tmp_path, monkeypatch):
    """``excerpt_done`` (the export's plugin check) gets the excerpt as soon as the first range is written
    where every entry of the excerpt lies in it: the helper's file of the second range is still there, and
    the copy is not. An entry of the excerpt in the second range (here: one without a time) waits for the
    end. The excerpt is the one-pass export's either way, and handed over once."""
    from stepscope.plugin_copy import stream_write

    src, _ = eager_junk
    monkeypatch.setattr(policy, "SPLIT_FROM", 0)
    monkeypatch.setattr(stream_plan, "SPLIT_EVENTS", 0)
    plan, header = stream_plan.plan_edits(src, LOCAL)
    (_, _), (_, second) = plan.ranges
    # the second range's entries after the first step: the excerpt of one step lies in the first range
    plan.ts[second:] = plan.step_starts[1] + 1.0
    if where == "second":
        plan.ts[second + 5] = float("nan")  # an entry without a time: in every excerpt
    stream_write.write_adapted_stream(src, tmp_path / "one" / "copy.json", plan, header,
                                      (tmp_path / "one.json", 1))  # one pass, here: the oracle
    dst = tmp_path / "out" / "copy.json"
    seen = []

    def done(path: Path) -> None:
        partial = [p.name for p in dst.parent.iterdir() if p.name.endswith(".partial")]
        seen.append((path.read_bytes(), dst.exists(), len(partial)))

    written = stream_write.write_adapted_stream(src, dst, plan, header, (tmp_path / "excerpt.json", 1),
                                                workers=LOCAL, excerpt_done=done)
    assert written == tmp_path / "excerpt.json" and len(seen) == 1
    got, copy_there, partial = seen[0]
    assert not copy_there and partial == (2 if where == "first" else 1)  # the copy's own, and the helper's
    assert got == (tmp_path / "one.json").read_bytes() == written.read_bytes()
    assert dst.read_bytes() == (tmp_path / "one" / "copy.json").read_bytes()


def test_an_excerpt_check_that_fails_fails_the_copy(eager_junk, tmp_path, monkeypatch):
    from stepscope.plugin_copy import stream_write

    src, _ = eager_junk
    monkeypatch.setattr(policy, "SPLIT_FROM", 0)
    monkeypatch.setattr(stream_plan, "SPLIT_EVENTS", 0)
    plan, header = stream_plan.plan_edits(src, LOCAL)

    def missing(path: Path) -> None:
        raise plugin_check.PluginMissing("cannot check the export: torch_tb_profiler failed to import")

    for workers in (LOCAL, Workers.inline()):
        with pytest.raises(plugin_check.PluginMissing):
            stream_write.write_adapted_stream(src, tmp_path / "out" / "copy.json", plan, header,
                                              (tmp_path / "excerpt.json", 1), workers=workers,
                                              excerpt_done=missing)
        assert not list((tmp_path / "out").iterdir())


@pytest.mark.parametrize("run", ["eager_bs128", "hf_trainer", "ddp_gloo"])
def test_the_call_stacks_made_in_two_parts_are_those_made_whole(run, tmp_path):
    """The copy's plan has the helper make the operators' call stacks up to a time and this process the rest
    (stream_plan.HELPER_STACKS): each part takes only the frames that can enclose its operators. At any split
    (before every operator, between, at an operator's own start, after all), the two parts are the whole."""
    import numpy as np
    from stepscope.plugin_copy.stream_callstack import call_stacks_of

    src, _ = _plain(tmp_path, run)
    c = plan_columns.read_columns(src)
    names = list(c.names)
    cat = stream_plan.Categories(np.frombuffer(c.cat_id, dtype=np.int64), c.categories)
    start, stop = np.frombuffer(c.start, dtype=np.float64), np.frombuffer(c.end, dtype=np.float64)
    args = (cat.among("python_function"), cat.among("cpu_op", "operator"), np.frombuffer(c.name_id, dtype=np.int64),
            names, np.frombuffer(c.thread, dtype=np.int64), start, stop, c.has_stack.array())
    whole = call_stacks_of(*args)
    assert len(whole) > 10
    op_starts = np.sort(start[args[1]])
    for split in (op_starts[0] - 1, *np.quantile(op_starts, [0.1, 0.5, 0.85]), op_starts[len(op_starts) // 3],
                  op_starts[-1] + 1):
        first, second = call_stacks_of(*args, -np.inf, float(split)), call_stacks_of(*args, float(split))
        assert not first.keys() & second.keys()
        assert {**first, **second} == whole, split
