"""`stepscope tensorboard`: TensorBoard with the PyTorch Profiler tab on any directory of traces.

    stepscope tensorboard --logdir DIR                      # http://127.0.0.1:6006/#pytorch_profiler
    stepscope tensorboard --logdir DIR --port 6007 --host 0.0.0.0 --shadow /tmp/dir-tb

Finds every trace under DIR (discover.py: stepscope runs, tensorboard_trace_handler, Lightning, accelerate,
export_chrome_trace), publishes each complete one, adapted for torch-tb-profiler 0.4.3 and with its
diagnosis (Text "diagnosis", Scalars "diagnosis/*"), as a run of a shadow logdir (shadow.py), and serves
that with `tensorboard` as a child process. DIR is only read. While it runs, DIR is polled every
--poll seconds: a new trace shows up within two polls plus the plugin's 10 s rescan; traces that arrive
for a run already shown appear as a new run `<run>@2`, `<run>@3`, ...

Each run is analysed in a process of its own with a time bound (a minute plus two per GB of trace, or
$STEPSCOPE_TB_BOUND_S seconds), the smallest first: TensorBoard starts with the runs done within 20 s, the
others are published as they end, and a run past its bound is reported in one line ("! run NAME ...
stopped ...") while the rest is served (tensorboard/watch.py).

Prints one line per published run ("+ run exp1: 2 traces (tensorboard_trace_handler): launch_bound"), one
per rejected file ("! ..."), and the URL. The shadow logdir is a temporary folder removed at exit, or
--shadow DIR2/logdir (kept; DIR2 must be outside DIR). Ctrl-C (or SIGTERM) stops TensorBoard, waits for it,
and exits 130 (143 on SIGTERM). TensorBoard and every process it starts also die when this process is killed outright (SIGKILL; Linux),
and a temporary folder left by a killed server is removed when the next one starts. Bad input (no such DIR, a port in use, --shadow inside DIR): one line on
stderr, exit code 2.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from stepscope.cli.oneline import OneLineParser
from stepscope.tensorboard.child import die_with_parent, group_command
from stepscope.tensorboard.shadow_root import WINDOWS_HERE, make_root, note_source, remove_stale
from stepscope.tensorboard.watch import WatchConfig, Watcher, bound_override
from stepscope.trace.errors import print_error

FIRST_WAIT_S = 20.0  # how long TensorBoard's start waits for the runs found at start


class UsageError(ValueError):
    """Bad input to this command; the message is the one line printed."""


class Stop(Exception):
    """SIGINT or SIGTERM arrived; `code` is the exit code to return."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@dataclass(frozen=True)
class ServeConfig:
    source: Path
    host: str
    port: int
    shadow: Path | None  # None: a temporary folder, removed at exit
    poll_s: float


def parse(argv: list[str] | None, prog: str) -> ServeConfig:
    p = OneLineParser(prog=prog, description=__doc__.splitlines()[0])
    p.add_argument("--logdir", type=Path, required=True, metavar="DIR", help="the directory of traces")
    p.add_argument("--port", type=int, default=6006)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    p.add_argument("--shadow", type=Path, default=None, metavar="DIR2",
                   help="keep the adapted runs in DIR2/logdir (default: a temporary folder)")
    p.add_argument("--poll", type=float, default=2.0, metavar="S", help="seconds between looks at DIR")
    a = p.parse_args(argv)
    if not a.logdir.is_dir():
        p.error(f"--logdir {a.logdir}: not a directory")
    if not 0 < a.port < 65536:
        p.error(f"--port {a.port}: not a TCP port (1-65535)")
    if not 0.1 <= a.poll <= 60:
        p.error(f"--poll {a.poll}: use 0.1 to 60 seconds")
    try:
        bound_override()
    except ValueError as e:
        p.error(str(e))
    if a.shadow is not None:
        src, shadow = a.logdir.resolve(), a.shadow.resolve()
        if shadow == src or src in shadow.parents or shadow in src.parents:
            p.error(f"--shadow {a.shadow}: must be outside --logdir {a.logdir} (DIR is never written) and not "
                    "contain it")
    return ServeConfig(a.logdir, a.host, a.port, a.shadow, a.poll)


def check_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError as e:
            raise UsageError(f"--host {host} --port {port}: cannot listen there ({e.strerror}); "
                             "pick another --port") from None


def tensorboard_command(logdir: Path, host: str, port: int) -> list[str]:
    """TensorBoard with the PyTorch Profiler tab's pages served for offline use (tensorboard/profiler_tab.py), as the
    leader of a process group that ends whole when it gets SIGTERM (tensorboard/child.py)."""
    return group_command(["-m", "stepscope.tensorboard.profiler_tab", "--logdir", str(logdir), "--host", host,
                          "--port", str(port), "--load_fast=false", "--reload_interval", "5"])


def _raise_stop(signum, _frame) -> None:
    raise Stop(128 + signum)


def serve(cfg: ServeConfig) -> int:
    check_port_free(cfg.host, cfg.port)
    for stale in remove_stale():  # left by a server that was killed before it could clean up
        print(f"removed {stale} (left by a stopped stepscope tensorboard)", flush=True)
    root = make_root() if cfg.shadow is None else cfg.shadow
    logdir, staging = root / "logdir", root / ".staging"
    logdir.mkdir(parents=True, exist_ok=True)
    note_source(logdir, cfg.source)  # the tab names the user's logdir, not this shadow
    watcher = Watcher(WatchConfig(cfg.source, logdir, staging))
    previous = {s: signal.signal(s, _raise_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    proc = None
    try:
        for _ in range(2):  # two looks: a trace must be the same at both before it is published
            for line in watcher.poll(wait_s=0):
                print(line, flush=True)
            time.sleep(cfg.poll_s)
        # TensorBoard starts with the runs analysed within FIRST_WAIT_S; a run that takes longer is published
        # while it serves (each run in its own process, with a time bound: tensorboard/watch.py)
        for line in watcher.poll(wait_s=FIRST_WAIT_S):
            print(line, flush=True)
        # TensorBoard and every process it starts die with this process, however it ends (SIGKILL too): the
        # port is never left served, and no loader is left under PID 1 (tensorboard/child.py). The tab's window
        # tool may write into this logdir: it is the shadow copy, never DIR (tab/plugin.py)
        proc = subprocess.Popen(tensorboard_command(logdir, cfg.host, cfg.port),
                                preexec_fn=die_with_parent(os.getpid(), group=True),
                                env={**os.environ, WINDOWS_HERE: str(logdir)})
        print(f"TensorBoard (pid {proc.pid}) at http://{cfg.host}:{cfg.port}/#pytorch_profiler (and #stepscope, "
              f"stepscope's tab) serving {len(watcher.runs)} run(s) from {logdir}; watching {cfg.source}; "
              "Ctrl-C stops", flush=True)
        while proc.poll() is None:
            time.sleep(cfg.poll_s)
            for line in watcher.poll(wait_s=0):
                print(line, flush=True)
        print(f"tensorboard exited with code {proc.returncode}", file=sys.stderr)
        return proc.returncode or 1
    except Stop as stop:
        return stop.code
    finally:
        for s, handler in previous.items():
            signal.signal(s, signal.SIG_IGN if s == signal.SIGINT else handler)  # no second Ctrl-C mid-cleanup
        watcher.close()
        if proc is not None:
            stop_child(proc)
        if cfg.shadow is None:
            shutil.rmtree(root, ignore_errors=True)
        else:
            shutil.rmtree(staging, ignore_errors=True)
        for s, handler in previous.items():
            signal.signal(s, handler)


def stop_child(proc: subprocess.Popen, timeout_s: float = 15.0) -> None:
    """SIGTERM, wait, then SIGKILL: TensorBoard is gone when this returns."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv: list[str] | None = None, prog: str = "stepscope tensorboard") -> int:
    cfg = parse(argv, prog)
    try:
        return serve(cfg)
    except UsageError as e:
        print_error(f"{prog}: error: {e}")
        return 2
