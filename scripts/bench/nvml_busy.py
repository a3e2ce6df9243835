"""The GPU's busy share as the driver samples it (NVML), with no profiler attached: a cross-check of GPU busy.

    python scripts/bench_nvml_busy.py            # the driver's reading against duty cycles set on the GPU

stepscope's GPU busy is the share of a step during which the device runs kernels or copies. The verdict
benchmarks' truth divides a CUDA-graph replay's span by the unprofiled step; for a step of a few hundred small
kernels that span is up to twice the time its kernels run (bench/graph_gaps.py), so it is the step's GPU floor
rather than its busy share. NVML's utilisation is defined as the share of each sample period "during which one
or more kernels was executing on the GPU", read by the driver while the loop runs unprofiled.
``driver_busy_pct`` runs a step for a while and averages the driver's samples taken inside that window;
``duty_cycle`` checks the reading against a GPU spin of measured length every period, the host idle in between.
Measured on an H200 (BENCHMARKS.md): right within 2 points at 2 ms periods, 5-8 points low at 0.1-0.2 ms
periods, blind to copies and high on thousands of tiny kernels, so it is recorded beside the truth, not as it.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

WINDOW_S = 2.0  # several of the driver's sample periods (1/6 s to 1 s, by GPU)


def _handle(device):
    """The NVML handle of a torch CUDA device, or None where NVML is not there."""
    try:
        import pynvml
        import torch

        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetHandleByIndex(torch.cuda._get_nvml_device_index(device))
    except Exception:  # noqa: BLE001 - no NVML (no driver, no pynvml): no second truth
        return None


def samples_since(handle, since_us: int) -> list[tuple[int, int]]:
    """(timestamp µs, utilisation %) of the driver's GPU-utilisation samples after ``since_us``."""
    import pynvml

    try:
        _kind, samples = pynvml.nvmlDeviceGetSamples(handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES, since_us)
    except pynvml.NVMLError:
        return []
    return [(s.timeStamp, s.sampleValue.uiVal) for s in samples if s.timeStamp > since_us]


def _latest_stamp(handle) -> int:
    got = samples_since(handle, 0)
    return max((t for t, _ in got), default=0)


def driver_busy_pct(step, device, seconds: float = WINDOW_S) -> float | None:
    """The mean of the driver's utilisation samples taken while ``step`` runs back to back for ``seconds``
    (after one untimed step), unprofiled; None without NVML or where no sample fell inside the window."""
    if getattr(device, "type", device) != "cuda":
        return None
    handle = _handle(device)
    if handle is None:
        return None
    import torch

    step()
    torch.cuda.synchronize()
    start = _latest_stamp(handle)
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        step()
    torch.cuda.synchronize()  # sync point: the window's end, outside any timed step
    inside = _inside(handle, start)
    return statistics.fmean(inside) if inside else None


def _inside(handle, start: int) -> list[int]:
    """The driver's samples after ``start`` less the first: a sample covers the period before its timestamp,
    so the first may reach back before the window."""
    return [v for _, v in samples_since(handle, start)[1:]]


def _spin_ms(cycles: int) -> float:
    """ms of one ``torch.cuda._sleep(cycles)`` on the device, timed with CUDA events (median of 5)."""
    import torch

    times = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        torch.cuda._sleep(cycles)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def _cycles_per_ms() -> float:
    return 1_000_000 / _spin_ms(1_000_000)


def duty_cycle(spin_ms: float, period_ms: float, seconds: float = WINDOW_S, device="cuda") -> dict:
    """A GPU spin of ``spin_ms`` launched every ``period_ms`` (the host waits out the rest): the known busy
    share (the spin timed with CUDA events, over the period the host kept) against the driver's reading."""
    import torch

    cycles = int(spin_ms * _cycles_per_ms())
    measured_spin = _spin_ms(cycles)
    handle = _handle(torch.device(device))
    start = _latest_stamp(handle) if handle is not None else 0
    t0 = time.perf_counter()
    n = 0
    while time.perf_counter() - t0 < seconds:
        torch.cuda._sleep(cycles)
        n += 1
        next_t = t0 + n * period_ms * 1e-3
        while time.perf_counter() < next_t:  # a busy wait: time.sleep is too coarse for 0.1 ms periods
            pass
    torch.cuda.synchronize()
    period = (time.perf_counter() - t0) * 1e3 / n
    inside = _inside(handle, start) if handle is not None else []
    return {"spin_ms": measured_spin, "period_ms": period, "true_pct": min(100.0, 100 * measured_spin / period),
            "driver_pct": statistics.fmean(inside) if inside else None, "samples": len(inside)}


CASES = ((0.2, 2.0), (0.02, 0.2), (1.0, 2.0), (0.05, 0.1), (1.8, 2.0))  # (spin ms, period ms)


def main(argv: list[str] | None = None) -> int:
    from stepscope.cli.oneline import OneLineParser

    p = OneLineParser(prog="bench_nvml_busy.py", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="also write the rows as JSON here")
    a = p.parse_args(argv)
    if a.out is not None and not a.out.parent.is_dir():
        p.error(f"--out {a.out}: no such folder {a.out.parent}")
    import torch

    if not torch.cuda.is_available():
        p.error("no CUDA GPU is visible: the driver's reading needs one")
    if _handle(torch.device("cuda")) is None:
        p.error("NVML is not available (pip install nvidia-ml-py; a driver)")
    rows = [duty_cycle(spin, period) for spin, period in CASES]
    print("| spin ms | period ms | true busy % | driver's % | samples |\n|---:|---:|---:|---:|---:|")
    for r in rows:
        d = "–" if r["driver_pct"] is None else f"{r['driver_pct']:.1f}"
        print(f"| {r['spin_ms']:.3f} | {r['period_ms']:.3f} | {r['true_pct']:.1f} | {d} | {r['samples']} |")
    if a.out:
        a.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
