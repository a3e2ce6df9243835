"""Check that this checkout reports and exports exactly what another checkout does, on every run in a folder.

    git worktree add /tmp/before 96f345e
    (cd /tmp/before && python setup.py -q build_ext --inplace)     # its compiled trace reader, where it has one
    python scripts/same_reports.py /tmp/before tests/data          # every run folder under tests/data
    python scripts/same_reports.py /tmp/before big/replica --no-export

For each folder holding traces directly (a run), both checkouts run `analyze RUN --json` (and, unless
--no-export, `--export-tensorboard`); the JSON reports and every exported file are compared byte for byte (a
gzip file by its uncompressed bytes), except the plugin copies themselves, which are compared as JSON values,
key order included: an edited event keeps the original's spacing where the compiled reader edits it in place
(plugin_copy/stream_write.py) and is re-encoded compact where it does not, so their bytes depend on which
reader a checkout has.
The other checkout is run through its own scripts/analyze.py, so it can be any commit: its `stepscope` is its
own trainer/ folder (a link to it comes first on that command's PYTHONPATH), whatever this environment has
installed. Without its compiled trace reader built in place it reads traces with msgspec. Prints one line per
run and exits 1 when anything differs.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TRACE_SUFFIXES = (".json", ".json.gz")


def runs(root: Path) -> list[Path]:
    """Folders that hold trace files themselves (a run folder), or a single trace file given as root."""
    if root.is_file():
        return [root]
    found = {p.parent if p.parent.name != "raw" and p.parent.parent.name != "raw" else p.parent.parent.parent
             for p in root.rglob("*") if p.is_file() and p.name.endswith(TRACE_SUFFIXES)}
    return sorted(f for f in found if not any(part.startswith((".", "exp")) for part in f.relative_to(root).parts))


def analyze(cmd: list[str], run: Path, out: Path | None, env: dict | None = None) -> tuple[int, str]:
    args = [*cmd, str(run), "--json"] + (["--export-tensorboard", str(out)] if out else [])
    r = subprocess.run(args, capture_output=True, text=True, timeout=900, env=env)
    return r.returncode, r.stdout


def own_package(checkout: Path, site: Path) -> dict:
    """The environment in which ``checkout``'s scripts import its own trainer/ folder as `stepscope`."""
    site.mkdir(parents=True, exist_ok=True)
    (site / "stepscope").symlink_to(checkout.resolve() / "trainer", target_is_directory=True)
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


def same_tree(a: Path, b: Path) -> list[str]:
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file()) if a.exists() else []
    files_b = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file()) if b.exists() else []
    if [f.name for f in files_a] != [f.name for f in files_b]:  # spans are mtimes: compare by name order
        return [f"files differ: {len(files_a)} vs {len(files_b)}"]
    return [str(fa) for fa, fb in zip(files_a, files_b, strict=True)
            if (as_json if is_copy(fa) else content)(a / fa) != (as_json if is_copy(fb) else content)(b / fb)]


def is_copy(relative: Path) -> bool:
    """An adapted plugin copy (not an original under raw/, nor a marker or excerpt)."""
    return "raw" not in relative.parts and relative.name.endswith((".pt.trace.json", ".pt.trace.json.gz"))


def as_json(path: Path) -> str:
    """A copy's JSON value, written out again (NaN and Infinity as Python's json writes them)."""
    return json.dumps(json.loads(content(path)))


def content(path: Path) -> bytes:
    """A file's bytes; a gzip file's uncompressed bytes (its header holds the time it was written)."""
    data = path.read_bytes()
    return gzip.decompress(data) if path.name.endswith(".gz") else data


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("other", type=Path, help="the other checkout (its scripts/analyze.py is run)")
    p.add_argument("root", type=Path, help="a folder of runs, or one trace file")
    p.add_argument("--no-export", action="store_true", help="compare the JSON reports only")
    a = p.parse_args()
    other = [sys.executable, str(a.other / "scripts" / "analyze.py")]
    here = [sys.executable, "-m", "stepscope.cli.main", "analyze"]
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        other_env = own_package(a.other, Path(tmp) / "other_site")
        for i, run in enumerate(runs(a.root)):
            outs = (None, None) if a.no_export else (Path(tmp) / f"a{i}" / "exp", Path(tmp) / f"b{i}" / "exp")
            rc_a, json_a = analyze(other, run, outs[0], other_env)
            rc_b, json_b = analyze(here, run, outs[1])
            diffs = [] if (rc_a, json_a) == (rc_b, json_b) else [f"report differs (exit {rc_a} vs {rc_b})"]
            if outs[0] is not None:
                diffs += same_tree(*outs)
            bad += bool(diffs)
            print(f"{'same' if not diffs else 'DIFFERENT'}  {run}" + (f": {'; '.join(diffs[:3])}" if diffs else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
