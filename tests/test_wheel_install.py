"""stepscope's wheel installs next to another distribution named `kernels`, and its command works from anywhere.

    pytest tests/test_wheel_install.py -q      # about a minute on 2 idle cores (mostly the 3-step training run)

Builds the wheel from this checkout's tracked files (in a temporary copy, so nothing is written into the
checkout), and a stub distribution `kernels` (`kernels.STUB = True`); installs both into a fresh venv that
reuses the system's torch (--system-site-packages; nothing is downloaded); then, from a folder outside the
repository, runs `stepscope train --profile` (3 CPU steps) and `stepscope analyze` on its run, and a plain
loop through the public API (`stepscope.profile`, `schedule`, `trace_handler`, `loader`, `input_copy`,
`analyze`). The wheel holds no benchmark (scripts/bench/ stays in the repository) and the command offers none.
The system site may hold an editable stepscope of another checkout: the checks make sure the venv's wheel is
what runs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
STUB_PYPROJECT = """[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "kernels"
version = "0.0.1"

[tool.setuptools]
packages = ["kernels"]
"""
SUBCOMMANDS = {"train", "analyze", "compare", "tensorboard", "verify", "diff"}
# The public API from the installed wheel, in a plain loop on the CPU: stepscope.profile's schedule and handler,
# then stepscope.schedule + trace_handler + loader + input_copy by hand; each run read back by stepscope.analyze.
API_LOOP = """
import json, sys, torch, stepscope
from torch import nn
model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
batches = [(torch.randn(32, 64), torch.randint(0, 10, (32,))) for _ in range(8)]

def train(prof):
    for x, y in stepscope.loader(batches):
        with stepscope.input_copy():
            x, y = x.to("cpu"), y.to("cpu")
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        prof.step()

with stepscope.profile("logs/api_profile", wait=1, warmup=1, active=2, skip_first=0,
                       capture_on_slowdown=False) as prof:
    train(prof)
handler = stepscope.trace_handler("logs/api_handler")
with torch.profiler.profile(schedule=stepscope.schedule(wait=1, warmup=1, active=2), on_trace_ready=handler) as prof:
    train(prof)
handler.close()
names = ("analyze", "trace_handler", "schedule", "loader", "input_copy", "profile")
print(json.dumps({"files": [sys.modules[getattr(stepscope, n).__module__].__file__ for n in names],
                  "verdicts": [stepscope.analyze(d).verdict for d in ("logs/api_profile", "logs/api_handler")]}))
"""
TRAIN = ["--profile", "--device", "cpu", "--steps", "3", "--skip-first", "0", "--wait", "0", "--warmup", "1",
         "--active", "2", "--synthetic-train-size", "64", "--synthetic-eval-size", "32", "--batch-size", "16",
         "--run-name", "wheel"]


def run(cmd, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    p = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    assert p.returncode == 0, f"{cmd}: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
    return p


def copy_tracked(dest: Path) -> None:
    """The files the wheel is built from, as committed in this checkout (plus uncommitted edits)."""
    files = subprocess.run(["git", "ls-files", "pyproject.toml", "setup.py", "README.md", "trainer", "kernels"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split()
    for name in files:
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((REPO / name).read_bytes())


def build_wheels(tmp: Path) -> list[Path]:
    src, stub, wheels = tmp / "src", tmp / "stub", tmp / "wheels"
    copy_tracked(src)
    (stub / "kernels").mkdir(parents=True)
    (stub / "pyproject.toml").write_text(STUB_PYPROJECT)
    (stub / "kernels" / "__init__.py").write_text("STUB = True\n")
    for project in (src, stub):  # the system's setuptools builds both; offline, no build isolation
        run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
             "-w", wheels, project], cwd=tmp)
    return sorted(wheels.glob("*.whl"))


@pytest.mark.slow
def test_wheel_runs_next_to_a_kernels_distribution(tmp_path):
    wheels = build_wheels(tmp_path)
    assert [w.name.split("-")[0] for w in wheels] == ["kernels", "stepscope"]
    with zipfile.ZipFile(wheels[1]) as wheel:
        names = wheel.namelist()
    assert {n.split("/")[0] for n in names} == {"stepscope", "-".join(wheels[1].name.split("-")[:2]) + ".dist-info"}
    assert "stepscope/report/front.py" in names and "stepscope/demo/loop.py" in names
    assert not [n for n in names if re.search(r"(^|/)bench(/|\.py$)|(^|/)bench_\w*\.py$", n)]  # no benchmark
    env_dir = tmp_path / "venv"
    venv.create(env_dir, system_site_packages=True, with_pip=False)  # the system's pip installs into it
    bin_dir = env_dir / "bin"
    run([sys.executable, "-m", "pip", "--python", bin_dir / "python", "install", "-q", "--no-deps", "--no-index",
         *wheels], cwd=tmp_path)

    away = tmp_path / "elsewhere"  # not the repository, and no checkout on any path
    away.mkdir()
    probe = run([bin_dir / "python", "-c",
                 "import json, kernels, stepscope, stepscope.kernels, stepscope.cli.main as c;"
                 "print(json.dumps([getattr(kernels, 'STUB', False), kernels.__file__, stepscope.__file__,"
                 " stepscope.kernels.__file__, c.__file__]))"], cwd=away)
    stub_flag, kernels_file, trainer_file, our_kernels_file, command_file = json.loads(probe.stdout)
    site = str(env_dir.resolve())
    assert stub_flag is True and kernels_file.startswith(site)
    for f in (trainer_file, our_kernels_file, command_file):
        assert f.startswith(site) and "/site-packages/stepscope/" in f, f

    usage = run([bin_dir / "stepscope", "--help"], cwd=away).stdout
    (listed,) = re.findall(r"usage: stepscope \{([^}]*)\}", usage)
    assert SUBCOMMANDS <= {n.strip() for n in listed.split(",")} and "bench" not in usage

    train = run([bin_dir / "stepscope", "train", *TRAIN], cwd=away, timeout=400)
    assert "completed: 3 steps" in train.stdout
    run_dir = away / "logs" / "wheel"
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"

    analyze = run([bin_dir / "stepscope", "analyze", "logs/wheel", "--json"], cwd=away)
    assert analyze.stderr.splitlines()[-1] == "found 1 trace (1 stepscope)"
    assert json.loads(analyze.stdout)["verdict"] == "cpu_bound"

    # the public API, from the installed wheel: one line into the same engine as the command
    api = run([bin_dir / "python", "-c",
               "import json, sys, stepscope\n"
               f"r = stepscope.analyze({str(REPO / 'tests' / 'data' / 'eager_bs128')!r})\n"
               "print(json.dumps([stepscope.__file__, stepscope.__version__, r.verdict, 'torch' in sys.modules]))"],
              cwd=away)
    api_file, version, verdict, torch_imported = json.loads(api.stdout)
    assert api_file.startswith(site) and version == "0.1.0"
    assert verdict == json.loads(run([bin_dir / "stepscope", "analyze", str(REPO / "tests" / "data" / "eager_bs128"),
                                      "--json"], cwd=away).stdout)["verdict"]
    assert torch_imported is False  # the analysis is torch-free

    loop = json.loads(run([bin_dir / "python", "-c", API_LOOP], cwd=away, timeout=400).stdout)
    for f in loop["files"]:
        assert f.startswith(site) and "/site-packages/stepscope/" in f, f
    for d, verdict in zip(("api_profile", "api_handler"), loop["verdicts"], strict=True):
        assert (away / "logs" / d / "diagnosis.md").read_text().startswith(f"# stepscope diagnosis: `{verdict}`")
        cli = run([bin_dir / "stepscope", "analyze", f"logs/{d}", "--json"], cwd=away)
        assert json.loads(cli.stdout)["verdict"] == verdict  # the API and the command read the run alike
