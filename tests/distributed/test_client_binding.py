"""``ember.distributed.client()`` starts a local cluster that only this machine can reach:
scheduler, workers and dashboard listen on 127.0.0.1 unless the caller asks otherwise."""

from __future__ import annotations

import pytest

pytest.importorskip("distributed", reason="ember.distributed needs dask.distributed (pip install -e '.[dask]')")
psutil = pytest.importorskip("psutil", reason="reading the listening sockets needs psutil (a distributed dependency)")

import ember.distributed  # noqa: E402

LOOPBACK = {"127.0.0.1", "::1"}


@pytest.fixture(autouse=True)
def _keep_environ():
    """Starting worker processes sets variables (MALLOC_TRIM_THRESHOLD_ ...) in this process's
    environment; later tests' subprocesses (``ember info``) must not inherit them."""
    import os

    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def _listening(pid_root: int) -> list[tuple[int, str, int]]:
    """(pid, ip, port) of every listening TCP socket of a process and its children."""
    root = psutil.Process(pid_root)
    found = []
    for proc in [root, *root.children(recursive=True)]:
        for conn in proc.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN:
                found.append((proc.pid, conn.laddr.ip, conn.laddr.port))
    return found


@pytest.mark.parametrize("processes", [True, False])
def test_local_cluster_listens_on_loopback_only(processes):
    import os

    with ember.distributed.client(n_workers=1, processes=processes) as c:
        dashboard_port = c.cluster.scheduler.http_server.port
        sockets = _listening(os.getpid())
        # worker processes talk over TCP on loopback; threads in this process over no socket at all
        prefix = "tcp://127.0.0.1:" if processes else "inproc://"
        assert c.scheduler.address.startswith(prefix)
        assert all(w.startswith(prefix) for w in c.scheduler_info()["workers"])
        if processes:  # (in-process, Dask writes the link with the machine's address)
            assert c.dashboard_link.startswith("http://127.0.0.1:")
        assert any(port == dashboard_port for _, _, port in sockets)  # the dashboard is among them
        exposed = [s for s in sockets if s[1] not in LOOPBACK]
        assert not exposed, f"listening beyond this machine: {exposed}"


def test_the_caller_can_ask_for_every_interface():
    with ember.distributed.client(n_workers=1, host="0.0.0.0") as c:
        import os

        port = c.cluster.scheduler.http_server.port
        assert ("0.0.0.0", port) in {(ip, p) for _, ip, p in _listening(os.getpid())}
