"""Trace work on a Dask cluster (the `distributed` package): the cluster side of the worker policy
(workers.py). Optional: `distributed` is imported only when a cluster is asked for
(from the clone: ``pip install -e '.[cluster]'``). Torch-free.

    with open_cluster("tcp://10.0.0.5:8786") as address: ...   # a running cluster: its scheduler
    with open_cluster("local:4") as address: ...               # a LocalCluster of 4 processes, for this block
    with open_cluster(None) as address: ...                    # no cluster: address is None
    results = dask_map(address, analyze_trace, jobs)           # analyze_trace(*job) on the workers, in order

Functions travel, not data: each task gets a trace's path and reads the file from the filesystem that the
workers share with this machine; only its small result comes back. A worker runs one task at a time when
started with one thread (``dask worker ADDRESS --nthreads 1``, as ``local:N`` does), so it holds one trace at
a time. ``local:N`` forks its workers from a server process that imported Dask once (``LOCAL_CONFIG``). docs/cluster.md says how to start a cluster.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager

CONNECT_TIMEOUT_S = 10  # for a scheduler that does not answer
LOCAL = re.compile(r"local:(\d+)")
ADDRESS = re.compile(r"(tcp|tls|ucx|inproc|ws|wss)://\S+")
INSTALL = "pip install -e '.[cluster]' (from the stepscope clone)"
# A local cluster's worker processes are forked from one server process that imported Dask once, instead of
# each starting a fresh interpreter that imports it again (Dask's default, "spawn"): N workers start for
# the CPU of about one. Their statistical profiler (a stack sample every 10 ms) feeds only Dask's dashboard.
LOCAL_CONFIG = {"distributed.worker.multiprocessing-method": "forkserver",
                "distributed.worker.profile.enabled": False}


class ClusterError(ValueError):
    """A cluster that cannot be used; the message is one line."""


def check_spec(spec: str) -> str:
    """``spec`` if it names a cluster (``local:N``, N >= 1, or a scheduler address such as
    ``tcp://host:8786``); ClusterError otherwise."""
    m = LOCAL.fullmatch(spec)
    if (m and int(m.group(1)) >= 1) or (not m and ADDRESS.fullmatch(spec)):
        return spec
    raise ClusterError(f"--cluster {spec}: expected a Dask scheduler address such as tcp://HOST:8786, or "
                       "local:N for N local worker processes")


def _distributed():
    try:
        import distributed
    except ImportError as e:
        raise ClusterError(f"--cluster needs Dask's distributed package ({e}); install it with {INSTALL}") \
            from None
    return distributed


@contextmanager
def open_cluster(spec: str | None) -> Iterator[str | None]:
    """The scheduler address of the cluster ``spec`` names (``check_spec``), started for the block when it is
    ``local:N`` (N worker processes of one thread each, on the loopback interface); None without ``spec``."""
    if spec is None:
        yield None
        return
    check_spec(spec)
    m = LOCAL.fullmatch(spec)
    if m is None:
        yield spec
        return
    distributed = _distributed()
    import dask

    with dask.config.set(LOCAL_CONFIG):
        try:
            cluster = distributed.LocalCluster(n_workers=int(m.group(1)), threads_per_worker=1, processes=True,
                                               host="127.0.0.1", dashboard_address=":0")
        except Exception as e:  # what Dask raises when its processes or ports cannot be had
            raise ClusterError(f"--cluster {spec}: cannot start a local Dask cluster ({type(e).__name__}: "
                               f"{e})") from None
        with cluster:
            yield cluster.scheduler_address


def dask_map(address: str, fn: Callable, jobs: list[tuple]) -> list:
    """``fn(*job)`` for each job as a task of the cluster at ``address``, results in the jobs' order. An
    exception a task raised is raised here (a TraceError stays one); ClusterError when the scheduler does not
    answer or a worker died."""
    distributed = _distributed()
    try:
        client = distributed.Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError) as e:
        raise ClusterError(f"--cluster {address}: no Dask scheduler answers there ({type(e).__name__})") \
            from None
    with client:
        futures = client.map(fn, *zip(*jobs), pure=False)
        try:
            return client.gather(futures)
        except distributed.KilledWorker as e:
            raise ClusterError(f"--cluster {address}: a Dask worker died running {e.args[0]} "
                               "(out of memory? give each worker one thread and more memory)") from None
