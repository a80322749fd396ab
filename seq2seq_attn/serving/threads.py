"""Search threads that end with their task, so that one sentence alone is searched at full speed.

On a CPU torch computes through OpenMP, and every thread that starts a parallel region keeps a team of
worker threads for the rest of its life. Once the process holds more of them than it has cores, OpenMP
stops spinning at its barriers and sleeps and wakes instead, at every operation of every step: a server
whose model was loaded in one thread and searched in a pool of others searched one sentence measurably
slower than a process with one team (docs/performance.md#serving). So the server loads its models in a
thread of their own (`in_own_thread`) and runs each search in a fresh thread (`FreshThreads`): a team
lives only as long as the one search that made it, and a lone search has the process's only team.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

T = TypeVar("T")
Task = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]  # a future and its call


def in_own_thread(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)` in a thread that ends with it (its result, or its exception raised here)."""
    with FreshThreads(1, "load") as threads:
        return threads.submit(fn, *args, **kwargs).result()


class FreshThreads(Executor):
    """At most `limit` tasks at once, each in a new thread that ends with it; the others wait their turn
    in the order they came."""

    def __init__(self, limit: int, name: str) -> None:
        self.limit, self.name = limit, name
        self._changed = threading.Condition()  # guards everything below
        self._waiting: deque[Task] = deque()
        self._running = 0
        self._started = 0  # threads started, for their names
        self._shut = False

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()
        with self._changed:
            if self._shut:
                raise RuntimeError("cannot schedule new searches after shutdown")
            self._waiting.append((future, fn, args, kwargs))
            self._start_waiting()
        return future

    def _start_waiting(self) -> None:
        """Start waiting tasks while fewer than `limit` run (called with the lock held)."""
        while self._waiting and self._running < self.limit:
            task = self._waiting.popleft()
            self._running += 1
            self._started += 1
            name = f"{self.name}-{self._started}"
            threading.Thread(target=self._run, args=task, name=name, daemon=True).start()

    def _run(self, future: Future[Any], fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
        try:
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as error:  # handed to whoever waits on the future
                    future.set_exception(error)
        finally:
            with self._changed:
                self._running -= 1
                self._start_waiting()
                self._changed.notify_all()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Take no more tasks; `cancel_futures` cancels those still waiting; `wait` waits for the rest."""
        with self._changed:
            self._shut = True
            if cancel_futures:
                while self._waiting:
                    self._waiting.popleft()[0].cancel()
            while wait and (self._running or self._waiting):
                self._changed.wait()
