"""The one schema of a trace event: the fields that any reader of a trace (the analysis, the plugin copy, the
excerpt, the step-name scan) takes from the events of ``traceEvents``. Torch-free.

    events = decode(text)            # a piece of traceEvents (bytes of a JSON array) -> list[Event]
    e.name, e.ts, e.args.correlation # absent fields: the defaults below (msgspec.UNSET where absence counts)
    Named = view("name", "cat", "ph")   # a Struct of a few of Event's fields, as Event defines them
    Timed = view("ts", "dur", args=("correlation",))   # ... and of its args' fields
    decode_named = decoder(Named)    # decode(text) -> list[Named]

msgspec decodes each event into an ``Event`` of these fields only (every other key is skipped), and the
compiled reader (fastread.py) reads the same fields, by their JSON names, into columns: a field added here is
read by both readers and by every decoder. Where a value is absent:

- ``name``, ``cat`` and the ``args`` that only need their presence known are ``UNSET`` (an event without a
  name differs from one whose name is null);
- ``ph``, ``ts``, ``dur``, ``tid``, ``correlation`` are None (absent and null read alike), ``pid`` is 0 (a
  kernel without ``args.device`` is on device ``pid or 0``);
- the ``[memory]`` event's numbers are 0 (``MEMORY_ARGS``).

A reader that needs only some of the fields decodes into a ``view`` of them (msgspec then skips the other
values, which is faster), never into a Struct of its own: the field names, JSON names and defaults are
defined once, here.

A value may be of any JSON type (``Any``): what a reader does with a name that is no string, or a time that
is no number, is its own rule. Only ``args`` must be an object or null: msgspec refuses a piece holding
another ``args`` (``msgspec.ValidationError``), and each reader says what such an event is to it.
"""

from __future__ import annotations

from typing import Any, get_args

import msgspec

UNSET = msgspec.UNSET


class Args(msgspec.Struct, gc=False):
    """The keys of an event's ``args`` that some reader uses."""
    # kernels, memcpys and runtime calls (the analysis, the copy's launch links)
    device: Any = UNSET
    stream: Any = UNSET
    correlation: Any = None
    input_dims: msgspec.Raw = msgspec.field(default=UNSET, name="Input Dims")  # only its presence is used
    # the [memory] event's args (MEMORY_ARGS)
    device_type: Any = msgspec.field(default=0, name="Device Type")
    total_allocated: Any = msgspec.field(default=0, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=0, name="Total Reserved")
    bytes: Any = msgspec.field(default=0, name="Bytes")
    addr: Any = msgspec.field(default=0, name="Addr")
    device_id: Any = msgspec.field(default=0, name="Device Id")
    # the ids and stacks that torch-tb-profiler links operators by (the plugin copy)
    ext_upper: Any = msgspec.field(default=UNSET, name="External id")
    ext_lower: Any = msgspec.field(default=UNSET, name="external id")
    module: Any = msgspec.field(default=UNSET, name="Python module id")
    call_stack: Any = msgspec.field(default=UNSET, name="Call stack")


class Event(msgspec.Struct, gc=False):
    """One entry of ``traceEvents`` (the module docstring says what an absent field reads as)."""
    name: Any = UNSET
    cat: Any = UNSET
    ph: Any = None
    ts: Any = None
    dur: Any = None
    tid: Any = None
    pid: Any = 0
    args: Args | None = None


NO_ARGS = Args()

# The args of a ``[memory]`` instant event that become a MemorySample, in its field order after ts (then the
# event's tid): every reader of traces fills exactly these, each an int, 0 where the event lacks it.
MEMORY_ARGS = ("Device Type", "Total Allocated", "Total Reserved", "Bytes", "Addr", "Device Id")
MEMORY_FIELDS = ("device_type", "total_allocated", "total_reserved", "bytes", "addr", "device_id")
assert [Args.__struct_encode_fields__[Args.__struct_fields__.index(k)] for k in MEMORY_FIELDS] == list(MEMORY_ARGS)

_RAW = msgspec.json.Decoder(list[msgspec.Raw])


def decoder(struct: type | None = None):
    """``decode(text)``: the events of a piece (a JSON array) as ``struct`` (default: Event; else a ``view``).
    A struct with ``Input Dims`` decodes from an immutable copy of ``text``: the msgspec.Raw it leaves keeps
    a reference to the text it came from, which the caller may change or reuse afterwards. Raises msgspec.DecodeError, or ValidationError for an entry that is no object or an ``args``
    that is neither an object nor null."""
    struct = struct or Event
    events, copy = msgspec.json.Decoder(list[struct]), _holds_raw(struct)

    def decode(text) -> list:
        return events.decode(bytes(text) if copy else text)
    return decode


def each_decoder(struct: type | None = None):
    """``decode_each(text)``: as ``decoder``'s, entry by entry where the piece holds entries that are no
    event: those stay the msgspec.Raw of their JSON text. Raises msgspec.DecodeError on text that is no JSON
    array."""
    struct = struct or Event
    events, one, copy = msgspec.json.Decoder(list[struct]), msgspec.json.Decoder(struct), _holds_raw(struct)

    def decode_each(text) -> list:
        try:
            return events.decode(bytes(text) if copy else text)
        except msgspec.ValidationError:
            out = []
            for r in _RAW.decode(bytes(text)):  # each Raw keeps a reference to this copy
                try:
                    out.append(one.decode(r))
                except msgspec.ValidationError:
                    out.append(r)
            return out
    return decode_each


def _holds_raw(struct: type) -> bool:
    """Whether ``struct`` (Event or a view) decodes ``Input Dims``, whose msgspec.Raw refers to the text."""
    args = next((f.type for f in msgspec.structs.fields(struct) if f.name == "args"), None)
    return args is not None and any("input_dims" in getattr(t, "__struct_fields__", ()) for t in get_args(args))


decode = decoder()
decode_each = each_decoder()


def from_object(e) -> Event | None:
    """The Event of an entry that Python's json read (a piece msgspec refuses: NaN or Infinity literals),
    as ``decode`` gives it; None for an entry that is no event (not an object, or ``args`` that is neither
    an object nor null)."""
    if type(e) is not dict:
        return None
    args = e.get("args")
    if args is not None:
        if type(args) is not dict:
            return None
        args = Args(args.get("device", UNSET), args.get("stream", UNSET), args.get("correlation"),
                    _PRESENT if "Input Dims" in args else UNSET, *(args.get(k, 0) for k in MEMORY_ARGS),
                    *(args.get(k, UNSET) for k in _LINK_ARGS))
    return Event(e.get("name", UNSET), e.get("cat", UNSET), e.get("ph"), e.get("ts"), e.get("dur"), e.get("tid"),
                 e.get("pid", 0), args)


def view(*names: str, args: tuple[str, ...] = ()) -> type:
    """A Struct of the ``Event`` fields ``names`` (not ``args``) and, when ``args`` names some of Args' fields,
    an ``args`` of those (an optional Struct, as Event's): each field with the JSON name and default of the
    one definition above. For a reader that needs only those (msgspec skips the other values)."""
    key = (names, args)
    if key not in _views:
        unknown = [n for n in names if n not in _EVENT_FIELDS or n == "args"] + \
            [n for n in args if n not in _ARGS_FIELDS]
        if unknown:
            raise ValueError(f"not a field of the event schema: {', '.join(unknown)} (args' fields go in args=)")
        fields = [_field(_EVENT_FIELDS[n]) for n in names]
        if args:
            inner = msgspec.defstruct("ArgsView", [_field(_ARGS_FIELDS[n]) for n in args], gc=False,
                                      module=__name__)
            fields.append(("args", inner | None, None))
        _views[key] = msgspec.defstruct("EventView", fields, gc=False, module=__name__)
        if args:
            _views_args[_views[key]] = inner
    return _views[key]


def args_of(struct: type) -> type:
    """The Struct of ``struct``'s ``args`` (Args for Event; a view's own for a view)."""
    return _views_args.get(struct, Args)


def _field(f: msgspec.structs.FieldInfo) -> tuple:
    return f.name, f.type, msgspec.field(default=f.default, name=f.encode_name)


_EVENT_FIELDS = {f.name: f for f in msgspec.structs.fields(Event)}
_ARGS_FIELDS = {f.name: f for f in msgspec.structs.fields(Args)}
_views: dict[tuple, type] = {}
_views_args: dict[type, type] = {}
_PRESENT = msgspec.Raw(b"[]")  # an "Input Dims" read by Python's json: only its presence is used
_LINK_ARGS = ("External id", "external id", "Python module id", "Call stack")
assert [f.encode_name for f in msgspec.structs.fields(Args)][-len(_LINK_ARGS):] == list(_LINK_ARGS)
