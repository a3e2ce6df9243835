r"""Write the plugin copy of a trace file by streaming it once more and applying an ``EditPlan``.

    plan, header = plan_edits(src)                      # stream_plan.py: first pass
    write_adapted_stream(src, dst, plan, header)        # second pass: events copied or rewritten in order

Unchanged events are copied as their original bytes (never re-serialised); an edited event is decoded,
changed the way ``adapt.py`` changes it, and re-encoded (compact, UTF-8); entries the plan does not keep
are left out. The top-level keys keep json's default separators, which Holistic Trace Analysis's
``"rank":\s+`` regex needs. The file appears under ``dst`` only once complete (a ``.tmp-*.partial`` name, then a rename), and
is gzipped when ``dst`` ends in ``.gz`` (level ``GZ_LEVEL``: fast, for files of gigabytes).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import tempfile
from pathlib import Path

import msgspec

from ..analysis.jsonstream import TraceStream
from .adapt import UNLINKED_KEY
from .stream_plan import UNSET, Edit, EditPlan

GZ_LEVEL = 1
_RAW = msgspec.json.Decoder(list[msgspec.Raw])
_ENCODE = msgspec.json.Encoder().encode


def apply_edit(e: dict, edit: Edit) -> dict:
    """``e`` with ``edit`` applied, in adapt_trace's order (guard, names, categories, ids, unlink, stack)."""
    if edit.guard_name:
        e.setdefault("name", "")
    if edit.guard_cat:
        e["cat"] = ""
    if edit.name is not None:
        e["name"] = edit.name
    if edit.touch_args:
        e["args"] = dict(e.get("args") or {})
    if edit.cat is not None:
        e["cat"] = edit.cat
    if edit.external_id is not UNSET:
        args = e["args"] = dict(e.get("args") or {})
        args["external id" if "external id" in args else "External id"] = edit.external_id
    if edit.unlink:
        args = e["args"] = dict(e.get("args") or {})
        args[UNLINKED_KEY] = args.pop("correlation", None)
    if edit.call_stack is not None:
        args = e["args"] = dict(e.get("args") or {})
        args["Call stack"] = edit.call_stack
    return e


def write_adapted_stream(src: Path, dst: Path, plan: EditPlan, header: dict) -> None:
    def fill(raw_out) -> None:
        out = gzip.GzipFile(fileobj=raw_out, mode="wb", compresslevel=GZ_LEVEL) \
            if Path(dst).name.endswith(".gz") else raw_out
        with out:
            _write(src, out, plan, header)

    _atomic(dst, fill)


def copy_file_atomic(src: Path, dst: Path) -> None:
    """Copy ``src`` byte for byte to ``dst``, which appears only once complete; a plain ``src`` is gzipped on the
    way when ``dst`` ends in .gz."""
    compress = Path(dst).name.endswith(".gz") and not Path(src).name.endswith(".gz")

    def fill(out) -> None:
        if compress:
            with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=GZ_LEVEL) as z:
                shutil.copyfileobj(f, z, 8 << 20)
        else:
            shutil.copyfileobj(f, out, 8 << 20)

    with open(src, "rb") as f:
        _atomic(dst, fill)


def _atomic(dst: Path, fill) -> None:
    """Create ``dst`` through ``fill(binary file)`` under a temporary name that no plugin lists, then rename."""
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".partial", dir=dst.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            fill(out)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)  # mkstemp creates 0600; these files are as readable as any other
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write(src: Path, out, plan: EditPlan, header: dict) -> None:
    out.write(b"{")
    for key, value in header.items():
        out.write(json.dumps(key).encode() + b": " + json.dumps(value).encode() + b", ")
    out.write(b'"traceEvents": [\n')
    keep, edits = plan.keep, plan.edits
    first = True
    n = 0
    with TraceStream(src) as stream:
        for raws in stream.decode_events(lambda view: _RAW.decode(bytes(view))):  # Raw keeps its buffer
            parts = []
            for i, r in enumerate(raws, n):
                if not keep[i]:
                    continue
                edit = edits.get(i)
                parts.append(bytes(r) if edit is None else _ENCODE(apply_edit(msgspec.json.decode(r), edit)))
            n += len(raws)
            if parts:
                out.write((b"" if first else b",\n") + b",\n".join(parts))
                first = False
    out.write(b"\n]}\n")
