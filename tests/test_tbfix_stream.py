"""The streamed export (two passes over the file) writes what ``adapt_trace`` writes on the loaded dict, and
copies the original byte for byte.

    python -m pytest -q tests/test_tbfix_stream.py
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from few_by_default import few_by_default
from hypothesis import given
from hypothesis import strategies as st
from reference.dict_rewrite import adapt_trace
from stepscope.plugin_copy import export_tensorboard
from stepscope.plugin_copy.export import export_file
from stepscope.trace.discover import discover
from stepscope.trace.files import load_trace

DATA = Path(__file__).parent / "data"
TRACES = sorted(DATA.glob("*/*.pt.trace.json.gz"))


# By default: a rank of an NCCL run (GPU-side steps), both gloo ranks, an eager GPU run and a CUDA graph; the
# other traces take the same two passes at more cost (slow).
@pytest.mark.parametrize("path", few_by_default(
    TRACES, ids=[p.parent.name + "/" + p.name.split(".")[0] for p in TRACES],
    keep=["nccl_ddp/vm_600_rank0", "ddp_gloo/ddp_gloo_rank0", "ddp_gloo/ddp_gloo_rank1", "eager_bs128/eager_bs128",
          "cuda_graph/cuda_graph"]))
def test_streamed_copy_is_adapt_trace(path, tmp_path):
    adapted, raw = export_file(tmp_path, "w", "1795259107760373831", path)
    assert load_trace(adapted) == json.loads(json.dumps(adapt_trace(load_trace(path))))
    assert raw.read_bytes() == path.read_bytes()


def test_edits_are_made_where_each_event_lies_and_read_as_the_decoded_rewrite(tmp_path, monkeypatch):
    """With the compiled reader, every edit of a Kineto trace (launch categories, operators' call stacks) is
    made where its event lies, none decoded; with msgspec alone each edited event is decoded and re-encoded.
    The two copies are the same JSON, and each is adapt_trace's."""
    from stepscope.plugin_copy import stream_write
    from stepscope.trace import fastread

    (path,) = [p for p in TRACES if p.parent.name == "eager_bs128"]
    decoded = []
    real = stream_write._edited
    monkeypatch.setattr(stream_write, "_edited", lambda raw, edit: decoded.append(edit) or real(raw, edit))
    fast, _ = export_file(tmp_path / "fast", "w", "1795259107760373831", path)
    assert decoded == []
    monkeypatch.setenv(fastread.PURE_ENV, "1")
    slow, _ = export_file(tmp_path / "slow", "w", "1795259107760373831", path)
    assert {e.cat for e in decoded} == {"runtime", None} and any(e.call_stack for e in decoded)
    assert load_trace(fast) == load_trace(slow) == json.loads(json.dumps(adapt_trace(load_trace(path))))


@pytest.mark.parametrize("block", [None, 64 << 10], ids=["whole", "pieces"])
def test_nan_and_infinity_are_normalised_and_kept(tmp_path, monkeypatch, block):
    """Python's json writes NaN and Infinity, msgspec refuses them: the pieces holding them are read by
    Python's json and written back with the literals, in events copied as they are and in edited ones
    (here: launches, whose category the copy changes); no second, in-memory rewrite is involved."""
    from stepscope.trace import jsonstream

    if block is not None:  # pieces of 64 KiB: the literals fall in many of them, and in the last
        defaults = jsonstream.TraceStream.__init__.__defaults__
        monkeypatch.setattr(jsonstream.TraceStream.__init__, "__defaults__", (block, *defaults[1:]))
    (tf,) = discover(DATA / "cuda_graph").traces
    trace = load_trace(tf.path)
    edited = 0
    for e in trace["traceEvents"]:
        if e.get("cat") == "cuda_runtime" and edited < 3:
            e.setdefault("args", {})["stepscope test"] = float("nan")
            edited += 1
        elif e.get("cat") == "cpu_op":
            e.setdefault("args", {})["stepscope test"] = float("inf")
    trace["stepscope test"] = float("-inf")
    src = tmp_path / "w.1795259109156023363.pt.trace.json"
    src.write_text(json.dumps(trace))
    adapted, raw = export_file(tmp_path / "out", "w", "1795259109156023363", src)
    got = load_trace(adapted)
    assert json.dumps(got, sort_keys=True) == json.dumps(adapt_trace(trace), sort_keys=True)
    runtime = [e for e in got["traceEvents"] if e.get("cat") == "runtime" and "stepscope test" in e["args"]]
    assert len(runtime) == 3 and all(e["args"]["stepscope test"] != e["args"]["stepscope test"] for e in runtime)
    assert raw.read_bytes() == src.read_bytes()


def test_entries_that_are_not_objects_are_left_out(tmp_path):
    (tf,) = discover(DATA / "cuda_graph").traces
    trace = load_trace(tf.path)
    trace["traceEvents"][5:5] = ["junk", 7, None]
    src = tmp_path / "w.1795259109156023363.pt.trace.json"
    src.write_text(json.dumps(trace))
    adapted, raw = export_file(tmp_path / "out", "w", "1795259109156023363", src)
    assert load_trace(adapted) == json.loads(json.dumps(adapt_trace(trace)))
    assert raw.read_bytes() == src.read_bytes()


def test_uncompressed_trace_exports_uncompressed(tmp_path):
    (tf,) = discover(DATA / "cuda_graph").traces
    src = tmp_path / "plain"
    src.mkdir()
    plain = src / "w.1795259109156023363.pt.trace.json"
    plain.write_bytes(gzip.decompress(tf.path.read_bytes()))
    (adapted,) = export_tensorboard(src, tmp_path / "out")
    assert adapted.name == "w.1795259109156023363.pt.trace.json"
    want = adapt_trace(load_trace(plain))["traceEvents"]
    assert load_trace(adapted)["traceEvents"] == json.loads(json.dumps(want))
    assert (tmp_path / "out" / "raw" / "1795259109156023363" / "w.trace.json").read_bytes() == plain.read_bytes()


def test_a_plain_kineto_file_is_exported_gzipped_when_asked(tmp_path):
    """The trainer's case: Kineto writes plain JSON, the run keeps gzipped copies (--gzip, the default)."""
    (tf,) = discover(DATA / "cuda_graph").traces
    plain = tmp_path / ".tmp-w-1795259109156023363.chrome.json"
    plain.write_bytes(gzip.decompress(tf.path.read_bytes()))
    adapted, raw = export_file(tmp_path / "run", "w", "1795259109156023363", plain, gz=True)
    assert adapted.name == "w.1795259109156023363.pt.trace.json.gz" and raw.name == "w.trace.json.gz"
    assert gzip.decompress(raw.read_bytes()) == plain.read_bytes()
    assert load_trace(adapted) == json.loads(json.dumps(adapt_trace(load_trace(plain))))


@pytest.mark.parametrize("separators", [None, (",", ":"), (", ", ": "), (" ,\n\t", " :")],
                         ids=["kineto", "compact", "json", "odd"])
@pytest.mark.parametrize("block", [None, 64 << 10], ids=["whole", "pieces"])
def test_stretches_of_the_original_copy_what_msgspecs_split_of_each_entry_does(separators, block, tmp_path,
                                                                               monkeypatch):
    """The writer finds where each entry lies without decoding it (fastread.spans) and copies consecutive
    entries it does not change as one stretch of the original's text, where the original separates them by
    ",\n" as the copy does. The copy and its excerpt are byte for byte those made from msgspec's split of
    every entry, whatever the original's separators, with entries that are no objects left out."""
    from stepscope.plugin_copy.stream_plan import plan_edits
    from stepscope.plugin_copy.stream_write import write_adapted_stream
    from stepscope.trace import fastread, jsonstream

    if block is not None:
        defaults = jsonstream.TraceStream.__init__.__defaults__
        monkeypatch.setattr(jsonstream.TraceStream.__init__, "__defaults__", (block, *defaults[1:]))
    (tf,) = discover(DATA / "cuda_graph").traces
    if separators is None:
        text = gzip.decompress(tf.path.read_bytes())  # as Kineto writes it: "},\n{" between events
    else:
        trace = load_trace(tf.path)
        trace["traceEvents"][5:5] = ["junk", 7, None, [1, {"x": "},{"}]]
        text = json.dumps(trace, separators=separators).encode()
    src = tmp_path / "w.1795259109156023363.pt.trace.json"
    src.write_bytes(text)
    plan, header = plan_edits(src)
    assert plan.edits and len(plan.step_starts) > 1
    found, real = [], fastread.spans

    def finding(piece):
        got = real(piece)
        found.append(got is not None)
        return got

    copies = []
    for spans in (finding, lambda piece: None):
        monkeypatch.setattr(fastread, "spans", spans)
        out = tmp_path / str(len(copies))
        excerpt = write_adapted_stream(src, out / "copy.json", plan, header, (out / "excerpt.json", 1))
        copies.append(((out / "copy.json").read_bytes(), excerpt.read_bytes()))
    # found for every piece but one cut inside the junk's "},{" (msgspec refuses it too: the stream retries)
    assert sum(found) >= (1 if block is None else 10) and found.count(False) <= (separators is not None)
    assert copies[0] == copies[1]
    assert load_trace(out / "copy.json") == json.loads(json.dumps(adapt_trace(json.loads(text))))


def test_the_writers_parsers_are_freed_once_it_has_written(tmp_path, monkeypatch):
    """The compiled reader's parsers of the writing thread (tens of MB for pieces of 8 MiB) are not kept
    once a copy is written, as a read's are not (a training process writes its cycles' copies)."""
    from stepscope.plugin_copy.stream_plan import plan_edits
    from stepscope.plugin_copy.stream_write import write_adapted_stream
    from stepscope.trace import _fastread

    (tf,) = discover(DATA / "cuda_graph").traces
    plan, header = plan_edits(tf.path)
    calls = []
    monkeypatch.setattr(_fastread, "release", lambda: calls.append(1))
    write_adapted_stream(tf.path, tmp_path / "copy.json.gz", plan, header)
    assert calls == [1]


@given(st.lists(st.integers(0, 300)), st.lists(st.integers(0, 300)))
def test_the_positions_written_apart_are_numpys_union(a, b):
    """The writer's entries not copied as they are (edited, left out): np.union1d's, by one sort."""
    from stepscope.plugin_copy.stream_write import _sorted_union
    a, b = np.array(a, dtype=np.int64), np.array(b, dtype=np.int64)
    assert _sorted_union(a, b).tolist() == np.union1d(a, b).tolist()


def test_the_original_is_kept_as_a_hard_link_where_the_file_system_allows_else_copied(tmp_path, monkeypatch):
    """The export's original under raw/: another name of the same file (no second gigabyte written), the same
    bytes; where no link can be made (another file system), or the copy is gzipped, a copy; never a
    leftover temporary file."""
    import errno
    import os

    (tf,) = discover(DATA / "cuda_graph").traces
    src = tmp_path / "w.1795259109156023363.pt.trace.json"
    src.write_bytes(gzip.decompress(tf.path.read_bytes()))
    adapted, raw = export_file(tmp_path / "linked", "w", "1795259109156023363", src)
    assert raw.read_bytes() == src.read_bytes() and os.path.samefile(raw, src) and src.stat().st_nlink == 2
    assert sorted(p.name for p in raw.parent.iterdir()) == [raw.name]

    def no_link(a, b):
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))

    monkeypatch.setattr(os, "link", no_link)
    adapted2, raw2 = export_file(tmp_path / "copied", "w", "1795259109156023363", src)
    assert raw2.read_bytes() == src.read_bytes() and not os.path.samefile(raw2, src)
    assert adapted2.read_bytes() == adapted.read_bytes()
    assert sorted(p.name for p in raw2.parent.iterdir()) == [raw2.name]
    monkeypatch.undo()
    adapted3, raw3 = export_file(tmp_path / "gz", "w", "1795259109156023363", src, gz=True)
    assert raw3.name.endswith(".gz") and gzip.decompress(raw3.read_bytes()) == src.read_bytes()


def test_an_edit_shared_by_many_entries_is_copied_before_one_of_them_changes():
    """The plan gives hundreds of thousands of launches (and operators of one call stack) one Edit object
    each kind; changing one entry's edit afterwards (a launch the step guard unlinks) changes that entry
    only, and an entry that already had an edit keeps it, with the shared fields set on it."""
    from stepscope.plugin_copy.stream_plan import Edit, EditPlan

    plan = EditPlan(keep=np.ones(6, dtype=bool))
    plan.edit(4).guard_name = True
    launch = Edit(cat="runtime", shared=True)
    root = Edit(cat="runtime", external_id=0, shared=True)
    plan.share([1, 2, 3, 4], [launch, launch, root, root])
    assert plan.edits[1] is plan.edits[2] is launch and plan.edits[3] is root
    assert plan.edits[4] == Edit(guard_name=True, cat="runtime", external_id=0) and not plan.edits[4].shared
    plan.edit(2).unlink = True
    assert plan.edits[2] == Edit(cat="runtime", unlink=True) and plan.edits[2] is not launch
    assert plan.edits[1] is launch and launch == Edit(cat="runtime") and not launch.unlink
    plan.share([5], [Edit(call_stack="a.py(3): f", shared=True)])
    plan.edit(5).external_id = 0
    assert plan.edits[5] == Edit(call_stack="a.py(3): f", external_id=0)
    assert plan.edits[4] is plan.edit(4)  # an entry's own edit is changed where it is
