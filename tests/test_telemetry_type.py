"""One telemetry type: `stepscope.report.telemetry.Telemetry`, from every producer, in one JSON form.

    pytest tests/test_telemetry_type.py -q      # seconds; one small real trace

What is asserted: the schedule's step clock and the trainer's Throughput produce a `Telemetry` whose JSON form
keeps the field order run.json and cycles.jsonl have always had; it reads like the dict it replaces; and
`stepscope.analyze` gives the same report for it as for its dict.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import stepscope
from stepscope.capture.cycle import Sums, telemetry_of
from stepscope.demo.timing import StepTime, Throughput
from stepscope.report.telemetry import Telemetry, as_dict

DATA = Path(__file__).parent / "data"


def test_the_schedules_step_clock_produces_one():
    t = telemetry_of(Sums(n=4, ns=40_000_000, data=8_000_000, copies=4, copies_timed=2, copy=2_000_000),
                     with_data=True)
    assert isinstance(t, Telemetry)
    # 2 of the 4 copies timed, 1 ms each: 1 ms of copy per step
    assert t.to_dict() == {"steps": 4, "step_ms": 10.0, "data_ms": 2.0, "copy_ms": 1.0}
    assert telemetry_of(Sums(), with_data=True) is None
    bare = telemetry_of(Sums(n=2, ns=10_000_000), with_data=False)
    assert list(bare.to_dict()) == ["steps", "step_ms"] and bare.data_ms is None and "data_ms" not in bare
    with_memory = bare.with_memory({"mem_peak_allocated_mib": 12.5, "mem_ooms": 0.0})
    assert list(with_memory) == ["steps", "step_ms", "mem_peak_allocated_mib", "mem_ooms"]


def test_the_trainers_throughput_produces_one_in_run_jsons_order():
    thr = Throughput(batch_size=8)
    thr.add([StepTime(ms=10.0 + i % 3, excluded=False,
                      phases={"cpu_ms": 3.0, "data_ms": 1.0, "dispatch_ms": 2.0}) for i in range(12)])
    thr.add([StepTime(ms=99.0, excluded=True)])  # warm-up or profiled: not timed
    t = thr.telemetry()
    assert isinstance(t, Telemetry) and t.steps == 12
    # the phases in the order of the fields (data, copy, copy_host, dispatch, cpu), then the spread of steps
    assert list(t.to_dict()) == ["steps", "step_ms", "data_ms", "dispatch_ms", "cpu_ms", "step_ms_mean",
                                 "step_ms_median", "step_ms_p25", "step_ms_p75"]
    assert t["step_ms"] == t.step_ms == pytest.approx(11.0) and t.get("copy_ms") is None
    assert Telemetry.from_dict(json.loads(json.dumps(t.to_dict()))) == t


def test_a_telemetry_reads_like_its_dict():
    t = Telemetry(steps=3, step_ms=4.5, data_ms=0.5)
    d = {"steps": 3, "step_ms": 4.5, "data_ms": 0.5}
    assert dict(t) == d == as_dict(t) and len(t) == 3 and "copy_ms" not in t
    with pytest.raises(KeyError):
        t["copy_ms"]
    with pytest.raises(KeyError):
        t["not_a_field"]
    assert as_dict(d) is d and as_dict(None) is None
    assert Telemetry.from_dict({**d, "windows": []}) == t  # keys that are no field are left out


def test_analyze_takes_a_telemetry_as_its_dict():
    run = DATA / "eager_bs128"
    d = {"steps": 20, "step_ms": 4.75, "data_ms": 0.1}
    by_dict = stepscope.analyze(run, telemetry=d).to_dict()
    by_type = stepscope.analyze(run, telemetry=Telemetry.from_dict(d)).to_dict()
    assert by_type == by_dict and by_dict["spans"][0]["metrics"]["step_ms"] == pytest.approx(4.75, abs=1e-2)
