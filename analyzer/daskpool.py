"""The Dask side of the fan-out (:mod:`analyzer.fanout`): a client of a scheduler, or a
local cluster, as an executor, and the waits a cluster needs bounded. Distributed is an
extra (``leakreport[dask]``): imported only here, only when asked for."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

CONNECT_S = 10  # for a scheduler to answer
WORKERS_S = 60  # for a first worker to join it
# a run whose cluster has had no worker this long gives up on the tasks left
NO_WORKERS_S = 60.0


class NoWorkers(RuntimeError):
    """The cluster has had no worker for a while: the tasks left will not run."""


def wait_result(f: Future[Any], alive: Callable[[], bool] | None) -> Any:
    """A task's result; where the cluster can say whether it has workers, the wait ends
    once it has had none for :data:`NO_WORKERS_S` (each killed, or unable to load this
    package), where it would wait for ever."""
    if alive is None:
        return f.result()
    since: float | None = None
    while True:
        try:
            return f.result(timeout=2.0)
        except FutureTimeout:
            if alive():
                since = None
                continue
            since = since or time.monotonic()
            if time.monotonic() - since > NO_WORKERS_S:
                raise NoWorkers(
                    f"the cluster has had no worker for {NO_WORKERS_S:.0f} s (killed, or "
                    "unable to load leakreport)"
                ) from None


def _connect(client_class: Any, scheduler: str) -> Any:
    """A client of ``scheduler``, or a ValueError once none answers in :data:`CONNECT_S`:
    a port that is no scheduler (its dashboard's, an HTTP server) takes the connection and
    never completes the handshake, where Dask's own timeout does not reach. The attempt
    runs in a daemon thread, left behind when it hangs."""
    import threading

    box: dict[str, Any] = {}

    def connect() -> None:
        try:
            box["client"] = client_class(scheduler, timeout=CONNECT_S)
        except BaseException as e:  # handed to the caller
            box["error"] = e

    t = threading.Thread(target=connect, name="leakreport-dask-connect", daemon=True)
    t.start()
    t.join(CONNECT_S + 5)
    if "client" in box:
        return box["client"]
    why = f" ({type(box['error']).__name__}: {box['error']})" if "error" in box else ""
    raise ValueError(
        f"--scheduler {scheduler}: no Dask scheduler answered there in {CONNECT_S} s{why}; "
        "a scheduler's own port is usually 8786 (8787 is its dashboard)"
    )


def dask_executor(scheduler: str | None = None, workers: int = 2) -> tuple[Executor, Any]:
    """A Dask executor, and the object to close: a client of ``scheduler``, or a local cluster."""
    try:
        from distributed import Client, LocalCluster
    except ImportError as e:
        raise ValueError(
            f"--executor dask needs Dask's distributed package ({e}): pip install 'leakreport[dask]'"
        ) from None

    if scheduler:
        client = _connect(Client, scheduler)
        try:
            client.wait_for_workers(1, timeout=WORKERS_S)
        except (OSError, TimeoutError):
            client.close()
            raise ValueError(
                f"--scheduler {scheduler}: no worker joined it in {WORKERS_S} s: start "
                "`dask worker` processes (with leakreport installed) against it"
            ) from None
        pool = client.get_executor()
        pool.alive = lambda: bool(client.scheduler_info().get("workers"))  # type: ignore[attr-defined]
        return pool, client
    cluster = LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
    )
    client = Client(cluster)

    class _Closer:
        def close(self) -> None:
            client.close()
            cluster.close()

    return client.get_executor(), _Closer()
