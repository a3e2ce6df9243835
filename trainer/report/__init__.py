"""The one door: `stepscope.analyze` and the Report it returns; telemetry, jobs and `diff` over reports.

    from stepscope.report import Report, RunsReport, analyze     # report/front.py (loaded on first use)
"""

from __future__ import annotations

import importlib

_FRONT = ("Report", "RunsReport", "analyze", "write_report", "read_report")
__all__ = list(_FRONT)


def __getattr__(name: str):
    if name not in _FRONT:
        raise AttributeError(f"module 'stepscope.report' has no attribute {name!r}")
    return getattr(importlib.import_module("stepscope.report.front"), name)
