"""Dask clusters: ``client()`` and a sampler of worker memory.

ember does not schedule anything itself (DESIGN.md, decision 8): a
``dask.distributed.Client`` made the default client routes every
``ember.compute`` and chunked gradient through the cluster; without one,
Dask's threaded scheduler runs them in this process.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from .._errors import BackendNotInstalledError

__all__ = ["client", "MemoryMonitor", "NO_DISTRIBUTED", "chunk_bytes"]

#: what a worker process holds before any data (Python, NumPy, Dask, distributed, ember)
WORKER_BASELINE = 110 * 2**20
BAD_LIMIT = ("chunk_bytes: the worker memory limit {limit} bytes leaves nothing for data above "
             "a worker's own ~{base} MiB. Fix: give workers more memory (memory_limit=...)")

NO_DISTRIBUTED = (
    "ember.distributed.{op}: dask.distributed is not installed. Fix: "
    'pip install -e ".[dask]" in the ember checkout (installs dask[array,distributed] and zarr)'
)


#: Where a local cluster listens unless the caller says otherwise.
LOCALHOST = "127.0.0.1"


def _bind_host(host: str | None) -> str:
    """The bare host of a scheduler ``host`` (``tcp://10.0.0.5:8786`` -> ``10.0.0.5``); '' for none."""
    if not host:
        return ""
    h = host.split("://", 1)[-1]
    if h.startswith("["):  # [IPv6]:port
        return h[: h.index("]") + 1]
    if h.count(":") == 1:  # host:port
        return h.rsplit(":", 1)[0]
    return f"[{h}]" if ":" in h else h  # a bare IPv6 address, or a name


def _distributed(op: str):
    try:
        import distributed
    except ImportError as e:
        raise BackendNotInstalledError(NO_DISTRIBUTED.format(op=op)) from e
    return distributed


def client(
    address: str | None = None,
    *,
    n_workers: int | None = None,
    threads_per_worker: int = 1,
    memory_limit: str | int | None = "auto",
    processes: bool = True,
    **kwargs: Any,
):
    """Connect to the scheduler at ``address``, or start a local cluster of worker processes.

    Why: the same training code runs on a laptop and on a cluster; only this
    call changes. Without ``address`` a ``LocalCluster`` of ``n_workers``
    processes (default: one per core) with ``threads_per_worker`` threads and
    ``memory_limit`` per worker (bytes or "2GB") starts, bound to 127.0.0.1 (scheduler,
    workers and dashboard, on free ports; pass ``host=`` to listen elsewhere);
    closing the client (``with ember.distributed.client() as c:``) stops it.
    The client becomes Dask's default, so ``ember.compute`` uses it.
    Other ``kwargs`` go to ``distributed.Client``.

    The local cluster listens on 127.0.0.1 only (scheduler, workers and the
    dashboard, which Dask would otherwise open on every interface): nothing
    of it is reachable from the network unless asked for with ``host=``,
    ``interface=`` or ``dashboard_address=`` (e.g. ``host="0.0.0.0"``).
    """
    distributed = _distributed("client")
    if address is not None:
        return distributed.Client(address, **kwargs)
    network = processes or kwargs.get("protocol") or kwargs.get("scheduler_port")  # else in-process
    if network and not {"host", "interface", "protocol"} & kwargs.keys():
        kwargs["host"] = LOCALHOST  # Dask's own default today; stated, so a changed default cannot expose it
    # a free port (no fixed one to collide on), on the scheduler's host rather than on every interface
    if "interface" not in kwargs:
        kwargs.setdefault("dashboard_address", f"{_bind_host(kwargs.get('host')) or LOCALHOST}:0")
    kwargs.setdefault("dashboard_address", ":0")
    if not network and "interface" not in kwargs:
        # an in-process worker still serves HTTP (health, metrics) and, having no TCP host to
        # copy, would listen on every interface; this also turns on its dashboard page
        kwargs.setdefault("worker_dashboard_address", f"{LOCALHOST}:0")
    return distributed.Client(
        n_workers=n_workers,
        threads_per_worker=threads_per_worker,
        memory_limit=memory_limit,
        processes=processes,
        **kwargs,
    )


def chunk_bytes(memory_limit: int | str | None = None, *, client: Any = None, tasks: int = 8) -> int:
    """Bytes for one data chunk on workers of ``memory_limit`` (or the smallest of ``client``'s).

    Why: a worker holds a few chunks at once (the one it reads, the one it
    computes on and its temporaries, one prefetched), and Dask restarts a
    worker at 95% of its limit. So a chunk gets
    ``(0.9 * limit - baseline) / tasks`` bytes, where the baseline is the
    worker's own code (about 110 MiB), capped at 64 MiB (larger chunks only
    cost memory) and at least 64 KiB.
    """
    if memory_limit is None and client is not None:
        limits = [w.get("memory_limit") for w in client.scheduler_info().get("workers", {}).values()]
        memory_limit = min((m for m in limits if m), default=None)
    if memory_limit is None:
        return 64 * 2**20
    if isinstance(memory_limit, str):
        import dask.utils

        memory_limit = dask.utils.parse_bytes(memory_limit)
    free = 0.9 * memory_limit - WORKER_BASELINE
    if free <= 0:
        raise ValueError(BAD_LIMIT.format(limit=memory_limit, base=WORKER_BASELINE // 2**20))
    return int(min(64 * 2**20, max(64 * 2**10, free / tasks)))


def _rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


class MemoryMonitor:
    """Samples the resident memory of every worker process while a ``with`` block runs.

    Why: "peak worker memory under the limit" is a claim about the workers,
    not about this process; this asks each worker for its RSS every
    ``interval`` seconds. ``peak`` is the largest sample of any one worker
    (bytes), ``peak_by_worker`` the largest per worker, ``limit`` the
    smallest memory limit the scheduler reports (None when unlimited).

    >>> # with ember.distributed.client(memory_limit="1GB") as c:
    >>> #     with MemoryMonitor(c) as mon:
    >>> #         ember.compute(...)
    >>> #     print(mon.peak / 2**20, "MiB")
    """

    def __init__(self, client, interval: float = 0.1):
        self.client = client
        self.interval = interval
        self.peak_by_worker: dict[str, int] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def peak(self) -> int:
        return max(self.peak_by_worker.values(), default=0)

    @property
    def limit(self) -> int | None:
        workers = self.client.scheduler_info().get("workers", {})
        limits = [w.get("memory_limit") for w in workers.values()]
        limits = [m for m in limits if m]
        return min(limits) if limits else None

    def sample(self) -> None:
        """Take one sample now."""
        try:
            res = self.client.run(_rss)
        except Exception:  # noqa: BLE001 - a worker restarting is not our failure
            return
        self.samples += 1
        for addr, rss in res.items():
            if rss > self.peak_by_worker.get(addr, 0):
                self.peak_by_worker[addr] = rss

    def _loop(self) -> None:
        while not self._stop.is_set():
            t0 = time.perf_counter()
            self.sample()
            self._stop.wait(max(0.0, self.interval - (time.perf_counter() - t0)))

    def __enter__(self) -> "MemoryMonitor":
        self.sample()
        self._thread = threading.Thread(target=self._loop, name="ember-memory-monitor", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()
