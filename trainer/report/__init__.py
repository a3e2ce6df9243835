"""The one door: `stepscope.analyze` and the report it returns; telemetry, jobs and `diff` over reports."""
