"""The streamed parse (analysis/stream_parse.py), the analysis' only parse, equals the reference parse of the
loaded dict (tests/reference/dict_parse.py) on every trace, and says the same one line about every bad one,
including those that msgspec refuses and that are normalised first (NaN, an event that is not an object).

    python -m pytest -q tests/test_stream_parse.py
"""

from __future__ import annotations

import errno
import gzip
import json
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import msgspec
import pytest
from few_by_default import few_by_default
from reference.dict_parse import parse_file, parse_trace
from stepscope.analysis import stream_parse, stream_ranges
from stepscope.analysis.report import parse_path
from stepscope.analysis.stream_parse import NoSteps, Unreadable, parse_trace_file
from stepscope.trace.errors import TraceError
from stepscope.trace.files import load_trace

DATA = Path(__file__).parent / "data"
TRACES = sorted(p for p in DATA.glob("*/*.json*") if "golden" not in p.parts and ".trace.json" in p.name)
STEP = '{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "ts": 1000, "dur": 50}'


# By default: a rank of an NCCL run, both gloo ranks, an eager GPU run and a CUDA graph; the other traces take
# the same path at more cost (slow).
@pytest.mark.parametrize("path", few_by_default(
    TRACES, ids=[p.parent.name + "/" + p.name.split(".")[0] for p in TRACES],
    keep=["nccl_ddp/vm_600_rank0", "ddp_gloo/ddp_gloo_rank0", "ddp_gloo/ddp_gloo_rank1", "eager_bs128/eager_bs128",
          "cuda_graph/cuda_graph"]))
def test_streamed_parse_equals_parse_trace(path):
    assert parse_trace_file(path, "w", "1") == parse_trace(load_trace(path), "w", "1")


def _trace(*events) -> dict:
    step = {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "ts": 1000.5, "dur": 50}
    return {"traceEvents": [step, *events], "distributedInfo": {"rank": 1, "world_size": 2}}


def test_small_pieces_and_edge_values(tmp_path):
    events = [{"ph": "X", "cat": "cpu_op", "name": f"aten::op{i}", "ts": 1001 + i, "dur": -1 if i % 7 else 2,
               "tid": i % 3, "args": {"Input Dims": [[1]]} if i == 5 else None} for i in range(40)]
    events += [{"ph": "X", "cat": "Kernel", "name": "k", "ts": 1002, "dur": 3, "pid": None,
                "args": {"device": None, "correlation": 9}},
               {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 1001.25, "dur": 1,
                "args": {"correlation": 9}},
               {"ph": "i", "name": "[memory]", "ts": 1003, "args": {"Device Type": 1, "Total Allocated": 7}},
               {"ph": "X", "cat": "python_function", "name": "<built-in method x>", "ts": 1004, "dur": 1},
               {"ph": "X", "cat": "python_function", "name": "a.py(1): f", "ts": 1004, "dur": 1},
               {"ph": "X", "cat": "python_function", "name": "nn.Module: Linear_0", "ts": 1005, "dur": 3},
               {"ph": "X", "cat": "python_function", "name": "<built-in method run_backward of torch._C._EngineBase "
                "object at 0x7f>", "ts": 1009.5, "dur": 4},
               {"name": "no ph"}, {"ph": "M", "name": "thread_name", "args": {"name": "x"}}]
    trace = _trace(*events)
    path = tmp_path / "w.1.pt.trace.json"
    path.write_text(json.dumps(trace, indent=2))
    want = parse_trace(trace, "w", "1")
    assert [(round(a, 1), round(b, 1)) for a, b in want.model_spans] == [(5.0, 8.0), (9.5, 13.5)]  # after base 1000
    assert parse_trace_file(path, "w", "1") == want
    for block in (97, 500, 4096):  # pieces of a few events, cut at many positions
        assert parse_trace_file(path, "w", "1", block=block) == want


def _error(fn, *args) -> str:
    with pytest.raises(TraceError) as e:
        result = fn(*args)
        if isinstance(result, TraceError):
            raise result
    assert "\n" not in str(e.value)
    return str(e.value)


def _same_error(path: Path) -> str:
    want = _error(parse_file, path, "w", "1")
    assert _error(parse_path, path, "w", "1") == want
    return want


BAD_EVENTS = {
    "nan_ts": ('{"ph": "X", "cat": "cpu_op", "name": "a", "ts": NaN, "dur": 1}', "has ts nan"),
    "infinite_dur": ('{"ph": "X", "cat": "kernel", "name": "k", "ts": 1001, "dur": Infinity}', "has dur inf"),
    "int_name": ('{"ph": "X", "cat": "cpu_op", "name": 5, "ts": 1001, "dur": 1}', "has a name that is a number"),
    "string_ts": ('{"ph": "X", "cat": "cpu_op", "name": "a", "ts": "1001", "dur": 1}', "has ts '1001'"),
    "huge_ts": ('{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1e300, "dur": 1}', "has ts 1e+300"),
    "list_args": ('{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1001, "dur": 1, "args": [1]}',
                  "has args that is an array"),
    "not_object": ("7", "event #1 is int"),
    "instant_step": ('{"ph": "i", "cat": "user_annotation", "name": "ProfilerStep#4", "ts": 1001}', "has ph 'i'"),
    "op_without_dur": ('{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1001}', "has no numeric ts/dur"),
    "memory_without_ts": ('{"ph": "i", "name": "[memory]", "args": {}}', "[memory] event #1 has no numeric"),
    "device_not_a_number": ('{"ph": "X", "cat": "kernel", "name": "k", "ts": 1001, "dur": 1, '
                            '"args": {"device": "gpu0"}}', "cannot analyse this trace (ValueError:"),
}


@pytest.mark.parametrize("case", BAD_EVENTS)
@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gz"])
def test_a_bad_event_gets_the_reference_error(tmp_path, case, gz):
    bad, fragment = BAD_EVENTS[case]
    path = tmp_path / ("w.1.pt.trace.json" + (".gz" if gz else ""))
    text = ('{"traceEvents": [' + STEP + ", " + bad + ', {"ph": "X", "cat": "cpu_op", "name": "b", "ts": 1002, '
            '"dur": 1}]}').encode()
    path.write_bytes(gzip.compress(text) if gz else text)
    assert fragment in _same_error(path)


@pytest.mark.parametrize("text, fragment", [
    (b"[]", "a JSON list, not an object"),
    (b'{"events": []}', "not a Chrome trace"),
    (b'{"traceEvents": []}', "no ProfilerStep#N events"),
    (b'{"traceEvents": [{"ph": "X", "cat": "Trace", "name": "a", "ts": 1, "dur": 1}]}', "no ProfilerStep#N"),
    (b'{"traceEvents": [{"ph": "X", "cat": "foreign", "name": "ProfilerStep#1", "ts": 1, "dur": 1}]}',
     "1 ProfilerStep#N events but none is a host step range: event #0 has cat 'foreign'"),
    (b'{"traceEvents": [' + STEP.encode() + b'], "distributedInfo": [1]}', "distributedInfo is an array"),
    (b'{"deviceProperties": {"a": NaN}, "traceEvents": [' + STEP.encode() + b"]}", "deviceProperties is an object"),
    (b'{"traceEvents": [tru', "unreadable trace (JSONDecodeError"),
    (b"\xff\xfe not text", "unreadable trace"),
    (b'{"traceEvents": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deeply"),
], ids=["list", "no_events", "empty", "no_steps", "foreign_steps", "bad_metadata", "nan_metadata", "truncated",
        "not_utf8", "deep"])
def test_a_bad_document_gets_the_reference_error(tmp_path, text, fragment):
    path = tmp_path / "w.1.pt.trace.json"
    path.write_bytes(text)
    assert fragment in _same_error(path)


def test_nan_where_the_analysis_does_not_look_is_normalised_and_parsed(tmp_path):
    """NaN in an argument nobody reads: msgspec refuses the text, Python's json reads it, and the normalised
    piece gives what the reference gives."""
    trace = _trace({"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1001, "dur": 2,
                    "args": {"Input Dims": [[1]], "scale": float("nan")}},
                   {"ph": "X", "cat": "kernel", "name": "k", "ts": 1002, "dur": 3, "args": {"correlation": 1}})
    path = tmp_path / "w.1.pt.trace.json"
    path.write_text(json.dumps(trace))
    assert "NaN" in path.read_text()
    want = parse_trace(trace, "w", "1")
    assert want.recorded_shapes and want.device
    assert parse_trace_file(path, "w", "1") == want
    assert parse_trace_file(path, "w", "1", block=64) == want


def test_a_trace_without_a_schedule_gets_the_reference_steps(tmp_path):
    """No ProfilerStep# anywhere: the steps are inferred (here: the whole window of its operators), as the
    reference infers them."""
    trace = {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 1},
                             {"ph": "X", "cat": "cpu_op", "name": "b", "ts": 5, "dur": 2}]}
    path = tmp_path / "w.1.pt.trace.json"
    path.write_text(json.dumps(trace))
    want = parse_trace(trace, "w", "1")
    assert want.steps and parse_trace_file(path, "w", "1") == want


def test_error_classes(tmp_path):
    path = tmp_path / "w.1.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#x", "ts": 1,
                                                 "dur": 1}]}))
    with pytest.raises(NoSteps) as e:
        parse_trace_file(path, "w", "1")
    assert e.value.step_names  # named like a step, though not ProfilerStep#<number>
    path.write_text("[]")
    with pytest.raises(Unreadable):
        parse_trace_file(path, "w", "1")


def test_a_bad_event_in_a_later_byte_range_is_named_by_its_index_in_the_file(tmp_path):
    """A helper that parses the second byte range does not know the index of its first event: the error
    comes from the one-process parse, as the reference gives it."""
    ops = [f'{{"ph": "X", "cat": "cpu_op", "name": "a", "ts": {1001 + i}, "dur": 1}}' for i in range(3000)]
    ops[2500] = '{"ph": "X", "cat": "cpu_op", "name": "bad", "ts": NaN, "dur": 1}'
    path = tmp_path / "w.1.pt.trace.json"
    path.write_text('{"traceEvents": [' + STEP + ",\n" + ",\n".join(ops) + "]}")
    want = _error(parse_file, path, "w", "1")
    assert "event #2501 ('bad', cat 'cpu_op') has ts nan" in want
    assert _error(parse_path, path, "w", "1", 2) == want


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gz"])
def test_byte_ranges_parse_without_falling_back(tmp_path, gz):
    """A good trace cut into byte ranges is parsed by the ranges themselves: the one-process parse that takes
    over from a range that fails (a bad event, a helper that cannot start) must not hide a broken range path,
    which costs twice the time on a large trace with the same result. A .gz trace's second range starts by
    decompressing the bytes before it (gzopen.py)."""
    import shutil

    from stepscope.analysis import stream_parse
    from stepscope.analysis.stream_collect import decode
    from stepscope.analysis.stream_ranges import collect_ranges, first_base
    from stepscope.trace.jsonstream import BLOCK, split_near

    src = next((Path(__file__).resolve().parent / "data" / "eager_bs128").glob("*.json.gz"))
    path = tmp_path / "trace.json"
    with gzip.open(src, "rb") as f, open(path, "wb") as out:
        shutil.copyfileobj(f, out)
    if gz:
        path = path.rename(path.with_name("trace.json.gz"))
        path.write_bytes(gzip.compress(path.read_bytes(), compresslevel=1))
    near = split_near(path, 2, decode, 1.0)
    assert len(near.ranges) == 2
    collector, _header = collect_ranges(path, near, first_base(path), BLOCK)  # raises if broken
    one = stream_parse.parse_trace_file(path, "w", "1")
    assert len(collector.ops) == len(one.ops) and len(collector.device) == len(one.device)
    assert stream_parse.parse_trace_file(path, "w", "1", parts=2) == one


@pytest.fixture
def plain_trace(tmp_path) -> Path:
    """eager_bs128's trace uncompressed: large enough to be cut into two byte ranges."""
    src = next((DATA / "eager_bs128").glob("*.json.gz"))
    path = tmp_path / "w.1.pt.trace.json"
    path.write_bytes(gzip.decompress(src.read_bytes()))
    return path


def _ranges_met(monkeypatch) -> list:
    """What each byte-range parse raised (None: it parsed), recorded as parse_trace_file runs them."""
    met = []
    real = stream_parse.collect_ranges

    def spy(*args, **kwargs):
        try:
            out = real(*args, **kwargs)
        except BaseException as e:
            met.append(e)
            raise
        met.append(None)
        return out

    monkeypatch.setattr(stream_parse, "collect_ranges", spy)
    return met


def test_a_range_whose_cut_finds_no_event_falls_back_to_the_same_parse(plain_trace, monkeypatch):
    """Each process finds its range's ends where they lie (jsonstream.Near): where no event start is confirmed
    after a cut's offset, the ranges fail (NoCut) and the file is parsed again in one process, with the result
    of parts=1."""
    from stepscope.trace import jsonstream

    one = parse_trace_file(plain_trace, "w", "1")
    real = stream_parse.split_near

    def nothing_decodes(text):
        raise msgspec.DecodeError("refused")

    monkeypatch.setattr(stream_parse, "split_near", lambda *a, **k: real(*a, **k)._replace(decode=nothing_decodes))
    met = _ranges_met(monkeypatch)
    assert parse_trace_file(plain_trace, "w", "1", parts=2) == one
    assert len(met) == 1 and isinstance(met[0], jsonstream.NoCut)
    assert isinstance(met[0], stream_ranges.RANGE_FAILURES)


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gz"])
@pytest.mark.parametrize("parts,weight", [(2, 0.7), (3, 1.0), (4, 0.5)])
def test_ranges_read_apart_meet_at_the_events_each_reader_finds(plain_trace, gz, parts, weight):
    """The readers of neighbouring ranges find the same event at their shared cut, whatever their blocks: the
    ranges hold every event once, in order, and the ends found are event starts as split_points finds them."""
    from stepscope.analysis.stream_collect import decode
    from stepscope.trace.jsonstream import TraceStream, _event_start_near, split_near

    path = plain_trace
    if gz:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(plain_trace.read_bytes(), compresslevel=1))
    near = split_near(path, parts, decode, weight, window=1 << 18)
    assert near is not None and len(near.ranges) == parts and near.window == 1 << 18
    with TraceStream(path) as ts:
        want = [e for piece in ts.decode_events(decode) for e in piece]
    got, found = [], []
    for k, span in enumerate(near.ranges):
        with TraceStream(path, block=[1 << 16, 3 << 20, 100_003, 1 << 20][k], span=span, near=near) as ts:
            got.extend(e for piece in ts.decode_events(decode) for e in piece)
            found.append((ts.start, ts.end))
    assert got == want
    starts = [s for s, _ in found]
    assert [e for _, e in found] == starts[1:] + [None]  # each range ends where the next one starts
    with open(plain_trace, "rb") as f:
        for (target, _), start in zip(near.ranges[1:], starts[1:]):
            assert target <= start < target + near.window
            assert start == _event_start_near(f, target, decode)


def test_a_file_too_small_for_its_windows_is_not_cut(plain_trace):
    from stepscope.analysis.stream_collect import decode
    from stepscope.trace.jsonstream import MIN_WINDOW, split_near

    size = plain_trace.stat().st_size
    assert split_near(plain_trace, size // (2 * MIN_WINDOW), decode) is not None
    assert split_near(plain_trace, size // (2 * MIN_WINDOW) + 1, decode) is None
    assert split_near(plain_trace, 1, decode) is None
    members = plain_trace.with_name("two.json.gz")  # the last member's trailer cannot tell: decompressed
    text = plain_trace.read_bytes()
    members.write_bytes(gzip.compress(text[:-1000]) + gzip.compress(text[-1000:]))
    assert split_near(members, 2, decode) == split_near(plain_trace, 2, decode)


@pytest.mark.parametrize("lead", [b" \n\t", b"\xef\xbb\xbf", b"\xef\xbb\xbf\r\n "], ids=["space", "bom", "both"])
def test_what_pythons_json_reads_past_before_the_object_changes_nothing(plain_trace, lead):
    """Before a trace's '{', Python's json reads past a UTF-8 byte order mark as the file's first bytes, then
    JSON's whitespace: the parse is the same, in one range or two. Anything else there is refused in one line
    (Python's json refuses it too)."""
    from stepscope.trace.jsonstream import read_header

    one, header = parse_trace_file(plain_trace, "w", "1"), read_header(plain_trace)
    text = plain_trace.read_bytes()
    for good in (lead, lead + b"\n"):
        plain_trace.write_bytes(good + text)
        assert isinstance(json.loads(plain_trace.read_bytes()), dict)
        assert read_header(plain_trace) == header  # the keys before traceEvents, without Python's json
        assert parse_trace_file(plain_trace, "w", "1") == one
        assert parse_trace_file(plain_trace, "w", "1", parts=2) == one
    for bad in (lead + b"[", b" \xef\xbb\xbf", b"\xef\xbb\xbf" * 2, b"\x0c"):
        plain_trace.write_bytes(bad + text)
        with pytest.raises(json.JSONDecodeError):
            json.loads(plain_trace.read_bytes())
        with pytest.raises(Unreadable, match="unreadable trace"):
            parse_trace_file(plain_trace, "w", "1")


def test_a_cut_confirmed_inside_a_string_falls_back_to_the_same_parse(plain_trace, monkeypatch):
    """A string that reads as events (``{}, {}, ...``) over the whole window after the cut's offset fools the
    check that confirms an event start there: the first range then ends inside the string, fails to decode, and
    the file is parsed again in one process, with the result of parts=1 (a smaller window costs only that)."""
    from stepscope.analysis.stream_collect import decode
    from stepscope.trace.jsonstream import _event_start_near, split_near

    text = plain_trace.read_bytes()
    size, weight = len(text) + (1 << 20), stream_parse.FIRST_RANGE_WEIGHT
    cut = int(size * weight / (weight + 1))  # where split_near cuts the file written below
    at = text.rfind(b'"name": "', 0, cut - (100 << 10)) + len(b'"name": "')
    plain_trace.write_bytes(text[:at] + b"{}, " * (1 << 18) + text[at:])  # a name of 1 MiB
    near = split_near(plain_trace, 2, decode, weight)
    assert near.ranges[1][0] == cut and cut + near.window < at + (1 << 20)
    with open(plain_trace, "rb") as f:
        assert at < _event_start_near(f, cut, decode) < at + (1 << 20)  # confirmed inside the name
    one = parse_trace_file(plain_trace, "w", "1")
    met = _ranges_met(monkeypatch)
    assert parse_trace_file(plain_trace, "w", "1", parts=2) == one
    assert len(met) == 1 and isinstance(met[0], stream_ranges.RANGE_FAILURES)


def test_a_corrupt_gz_range_gets_the_one_process_error(plain_trace):
    """A .gz file corrupt past the cut: cutting it or reading a range fails (zlib.error, EOFError, or garbage
    that is no JSON), and the error is the one-process parse's one line."""
    raw = bytearray(gzip.compress(plain_trace.read_bytes()))
    at = len(raw) * 3 // 4
    raw[at:at + 200] = bytes(b ^ 0x55 for b in raw[at:at + 200])
    path = plain_trace.with_name("w.1.pt.trace.json.gz")
    path.write_bytes(bytes(raw))
    want = _error(parse_path, path, "w", "1")
    assert _error(parse_path, path, "w", "1", 2) == want
    assert "unreadable trace" in want


@pytest.mark.parametrize("failure", [
    BrokenProcessPool("A process in the process pool was terminated abruptly"),
    OSError(errno.EAGAIN, "Resource temporarily unavailable"),  # fork refused
    MemoryError(),
    TraceError("event #3 ('a', cat 'cpu_op') has ts nan"),
    RuntimeError("maximum recursion depth exceeded"),  # JSON nested too deeply
], ids=lambda e: type(e).__name__)
def test_a_range_path_that_fails_falls_back_to_the_same_parse(plain_trace, monkeypatch, failure):
    """A helper that could not start or died, memory, a bad event, an unreadable range: parts=1's result."""
    one = parse_trace_file(plain_trace, "w", "1")

    def fails(*args, **kwargs):
        raise failure

    monkeypatch.setattr(stream_parse, "collect_ranges", fails)
    assert parse_trace_file(plain_trace, "w", "1", parts=2) == one


@pytest.mark.parametrize("defect", [AttributeError("'Collector' object has no attribute 'op'"),
                                    TypeError("unsupported operand type(s)"), NameError("name 'c' is not defined"),
                                    KeyError("names")], ids=lambda e: type(e).__name__)
def test_a_defect_of_the_range_path_is_not_hidden(plain_trace, monkeypatch, defect):
    """A programming error in the byte-range path is raised, not swallowed by the one-process parse (which
    would hide it behind twice the time); report.parse_path names it in the trace's one-line error, as it
    does for the one-process parse (a NameError it lets through)."""
    calls = []
    real = stream_parse.Collector

    def fails(*args, **kwargs):
        raise defect

    monkeypatch.setattr(stream_parse, "collect_ranges", fails)
    monkeypatch.setattr(stream_parse, "Collector", lambda *a: calls.append(a) or real(*a))
    with pytest.raises(type(defect)):
        parse_trace_file(plain_trace, "w", "1", parts=2)
    assert calls == []  # the one-process parse did not run
    if isinstance(defect, NameError):  # no trace causes one: parse_path lets it through too
        with pytest.raises(NameError):
            parse_path(plain_trace, "w", "1", 2)
        return
    error = parse_path(plain_trace, "w", "1", 2)
    assert isinstance(error, TraceError)
    assert f"cannot analyse this trace ({type(defect).__name__}: " in str(error)


def test_first_base_says_none_of_an_unreadable_file_and_raises_a_defect(tmp_path, monkeypatch):
    """The range path's base: None where the file cannot be read (the one-process parse then says why), a
    defect raised."""
    path = tmp_path / "w.1.pt.trace.json"
    path.write_bytes(b'{"traceEvents": [tru')
    assert stream_ranges.first_base(path, 64) is None
    assert stream_ranges.first_base(tmp_path / "missing.json", 64) is None

    def defect(*args, **kwargs):
        raise AttributeError("defect")

    monkeypatch.setattr(stream_ranges.Collector, "find_base", defect)
    path.write_text(json.dumps(_trace()))
    with pytest.raises(AttributeError):
        stream_ranges.first_base(path, 64)


def test_a_field_that_is_no_number_in_a_later_byte_range_gets_the_one_process_error(tmp_path, monkeypatch):
    """int()'s TypeError of a device that is a list is raised by the range that meets it (not a failure
    the one-process parse is asked about), and is the error parts=1 gives."""
    ops = [f'{{"ph": "X", "cat": "cpu_op", "name": "a", "ts": {1001 + i}, "dur": 1}}' for i in range(3000)]
    ops[2500] = '{"ph": "X", "cat": "kernel", "name": "k", "ts": 3501, "dur": 1, "args": {"device": [1]}}'
    path = tmp_path / "w.1.pt.trace.json"
    path.write_text('{"traceEvents": [' + STEP + ",\n" + ",\n".join(ops) + "]}")
    want = _error(parse_path, path, "w", "1")
    assert "cannot analyse this trace (TypeError: " in want
    met = _ranges_met(monkeypatch)
    assert _error(parse_path, path, "w", "1", 2) == want
    assert len(met) == 1 and isinstance(met[0], TypeError)


def test_a_pieces_text_is_never_changed_after_it_decoded(tmp_path):
    """What a piece's decode makes may keep its text instead of copying it (the compiled reader's columns,
    msgspec.Raw): the stream must not change that text afterwards, also where a cut fell inside a string and
    was retried with more text."""
    import msgspec
    from stepscope.trace.jsonstream import TraceStream

    # names holding what looks like a boundary between two events: some cuts fail and are retried
    events = [{"name": f'op{i} }}, {{"x": {i}}}' if i % 7 == 0 else f"op{i}", "ph": "X", "ts": i, "dur": 1}
              for i in range(3000)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    kept = []  # (the text decode was given, its bytes then)

    def decode(text):
        out = msgspec.json.decode(text)
        kept.append((text, bytes(text)))
        return out

    with TraceStream(path, block=1 << 12) as ts:
        decoded = [e for piece in ts.decode_events(decode) for e in piece]
    assert decoded == events
    assert len(kept) > 10
    assert all(bytes(text) == then for text, then in kept)


class _Dribble:
    """A binary file that gives at most ``most`` bytes per read, as a pipe or a decompressor may."""

    def __init__(self, path: Path, most: int) -> None:
        self._f, self._most = open(path, "rb"), most

    def read(self, n: int = -1) -> bytes:
        return self._f.read(self._most if n is None or n < 0 else min(n, self._most))

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)

    def close(self) -> None:
        self._f.close()


class _ReadOnly(_Dribble):
    """A file of an opener that has read() and nothing to read into."""

    readinto = property(lambda self: (_ for _ in ()).throw(AttributeError("readinto")))


@pytest.mark.parametrize("unset", ["compiled", "zeroed", "read_only"])
def test_the_file_is_read_into_each_pieces_buffer_through_short_reads(tmp_path, monkeypatch, unset):
    """The stream reads the file's bytes straight into the buffer that then holds the piece (not zeroed first
    where the extension is built): reads that give fewer bytes than asked, and a buffer made without the
    extension, decode the same events; no byte the file did not give is ever in a piece."""
    from stepscope.trace import jsonstream
    from stepscope.trace.jsonstream import TraceStream

    if unset == "zeroed":
        monkeypatch.setattr(jsonstream, "_unset_bytes", bytearray)
    events = [{"name": f"op{i}", "ph": "X", "ts": i, "dur": 1, "args": {"s": "x" * (i % 50)}}
              for i in range(2000)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events, "after": 1}))
    text = path.read_bytes()
    for most, block in ((7, 1 << 12), (1 << 20, 1 << 12), (333, 1 << 16)):
        pieces = []

        def decode(piece, pieces=pieces):
            pieces.append(bytes(piece))
            return msgspec.json.decode(piece)

        kind = _ReadOnly if unset == "read_only" else _Dribble
        with TraceStream(path, block=block, opener=lambda p, most=most, kind=kind: kind(p, most)) as ts:
            decoded = [e for piece in ts.decode_events(decode) for e in piece]
            header = ts.header
        assert decoded == events and header == {"schemaVersion": 1, "after": 1}, (most, block)
        # each piece is '[' + the file's own bytes + ']'
        assert all(p[1:-1] in text for p in pieces) and len(pieces) > 3, (most, block)


def test_a_nul_byte_in_a_later_block_is_named_by_its_offset_in_the_file(tmp_path):
    """The NUL check of each block read into a piece's buffer counts offsets from the file's start."""
    from stepscope.trace.jsonstream import NotJSON, TraceStream

    events = [{"name": f"op{i}", "ph": "X", "ts": i, "dur": 1} for i in range(3000)]
    text = bytearray(json.dumps({"traceEvents": events}).encode())
    at = len(text) * 2 // 3
    text[at] = 0
    path = tmp_path / "t.json"
    path.write_bytes(bytes(text))
    with pytest.raises(NotJSON, match=f"a NUL byte at offset {at},"), TraceStream(path, block=1 << 10) as ts:
        for _ in ts.decode_events(msgspec.json.decode):
            pass


def _nul_trace(where: str) -> bytes:
    """A trace of 4000 events (several pieces, two byte ranges) with NUL bytes put ``where``; the first NUL's
    offset is the one every reader must name."""
    events = [{"ph": "X", "cat": "cpu_op", "name": f"aten::op{i}", "ts": 1000 + i, "dur": 1, "tid": 1,
               "args": {"External id": i}} for i in range(4000)]
    text = bytearray(json.dumps({"traceEvents": [json.loads(STEP), *events], "after": "end"}).encode())
    n = len(text)
    at = {"header": text.index(b"[") + 1,  # the first byte after the array opens
          "string": text.index(b"aten::op1234") + 6,  # inside a name, in the first range
          "between": text.index(b", {", n // 2) + 1,  # between two events, near where the ranges meet
          "late_string": text.index(b"aten::op3990") + 6,  # in the last piece
          "after_array": text.rindex(b"]") + 1}[where]
    text[at] = 0
    text[n - 20] = 0  # a later one, never named
    return bytes(text)


@pytest.mark.parametrize("parts", [1, 2])
@pytest.mark.parametrize("reader", ["compiled", "msgspec"])
@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gz"])
@pytest.mark.parametrize("where", ["header", "string", "between", "late_string", "after_array"])
def test_the_first_nul_byte_is_named_by_its_offset_wherever_it_lies(tmp_path, monkeypatch, where, gz, reader,
                                                                   parts):
    """The text that decodes is not searched for NUL bytes; the text that fails is. Wherever the first NUL
    lies (the header, a string, between events, the last piece, after the array), whichever reader and
    however many byte ranges read it, the error names its offset in the file's text."""
    if reader == "msgspec":
        monkeypatch.setenv("STEPSCOPE_PURE_PYTHON", "1")
    text = _nul_trace(where)
    path = tmp_path / ("w.1.pt.trace.json" + (".gz" if gz else ""))
    path.write_bytes(gzip.compress(text, 1) if gz else text)
    with pytest.raises(Unreadable, match=f"a NUL byte at offset {text.index(0)}, which no JSON text holds"):
        parse_trace_file(path, "w", "1", block=16 << 10, parts=parts)


def test_an_unset_buffer_has_the_size_asked_and_refuses_a_negative_one():
    from stepscope.trace import _fastread

    assert isinstance(_fastread.empty(5), bytearray) and len(_fastread.empty(5)) == 5
    assert _fastread.empty(0) == b""
    with pytest.raises(ValueError, match="negative"):
        _fastread.empty(-1)


def test_a_gzipped_trace_is_not_decompressed_to_its_cut_before_the_ranges_start(plain_trace, monkeypatch):
    """Each range's reader finds its own cut (jsonstream.split_near): this process decompresses its own range
    and the window after its end, once, and no more (finding the cut first decompressed the file up to it
    once more, before any helper started); the helper decompresses up to its start itself."""
    from stepscope.trace import gzopen, jsonstream

    path = plain_trace.with_name(plain_trace.name + ".gz")
    path.write_bytes(gzip.compress(plain_trace.read_bytes(), compresslevel=1))
    one = parse_trace_file(path, "w", "1")
    here = []
    real_read = gzopen._Gz.read
    parent = __import__("os").getpid()

    def counted(self, n=-1):
        data = real_read(self, n)
        if __import__("os").getpid() == parent:
            here.append(len(data))
        return data

    monkeypatch.setattr(gzopen._Gz, "read", counted)
    met = _ranges_met(monkeypatch)
    assert parse_trace_file(path, "w", "1", parts=2) == one
    assert met == [None]  # parsed by the ranges
    near = jsonstream.split_near(path, 2, stream_parse.decode, stream_parse.FIRST_RANGE_WEIGHT_GZ)
    first_base_read = stream_ranges.BASE_BLOCK * 4  # the base, from the file's first few blocks
    assert sum(here) <= near.ranges[0][1] + near.window + first_base_read


def _traces_of_tests_data() -> list[Path]:
    from stepscope.trace.discover import discover

    out = []
    for d in sorted(p for p in DATA.rglob("*") if p.is_dir()):
        try:
            out += [tf.path for tf in discover(d).traces if tf.path.parent == d]
        except Exception:  # a folder that is no run (the reference outputs ...)
            continue
    return out


_EVERY_TRACE = _traces_of_tests_data()


_TRACE_IDS = [f"{p.parent.relative_to(DATA).as_posix()}-{k}" for k, p in enumerate(_EVERY_TRACE)]


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gz"])
@pytest.mark.parametrize("src", few_by_default(
    _EVERY_TRACE, ids=_TRACE_IDS, keep=[i for i in _TRACE_IDS if i.rsplit("-", 1)[0] in ("nccl_ddp", "cuda_graph")]))
def test_every_trace_of_tests_data_parses_in_ranges_as_in_one(src, gz, tmp_path, monkeypatch):
    """Each range's reader finds its cut in real traces of every shape (GPU and CPU, NCCL, CUDA graphs,
    memory, Lightning, Hugging Face ...), plain and gzipped: the ranges are used, not the one-process parse
    they fall back to, and give its result."""
    text = gzip.decompress(src.read_bytes()) if src.name.endswith(".gz") else src.read_bytes()
    path = tmp_path / ("t.pt.trace.json" + (".gz" if gz else ""))
    path.write_bytes(gzip.compress(text, compresslevel=1) if gz else text)
    one = parse_trace_file(path, "w", "1")
    met = _ranges_met(monkeypatch)
    assert parse_trace_file(path, "w", "1", parts=2) == one
    assert met == [None]
