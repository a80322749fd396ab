"""Micro-batching: the sentences of requests that arrive together are searched as one batch.

A beam search over 32 sentences costs little more than over one on a CPU's vector units (and far less
than 32 searches), so a server that searched each request alone would waste most of its time. Requests
wait in a queue; a worker takes up to `max_sentences` sentences from the waiting requests, one sentence
from each request in turn, so a request of 64 sentences shares every batch with the requests that arrive
behind it instead of making them wait for all of its sentences. A batch is started as soon as it is
full, or `max_wait` seconds after its first sentence arrived. The token budget is the search's own
(`decode.batch_tokens`): it cuts a batch of long sentences further, as it cuts a file's.

The fp32 search is batch-invariant: a sentence gets the same translations alone or among others (the
search keeps each sentence's rows apart and compares nothing across sentences), its scores equal to the
last float bits (matrix kernels pick their blocking by row count). The int8 copy
quantises each batch's activations with one scale, so there a sentence's answer can depend on its
neighbours: `mix_requests=False` keeps every batch to one request's sentences (what `seq2seq translate`
does with the same lines), and the server sets it for int8 models unless asked to mix.

The search itself runs in `executor` (one thread per model), so the event loop keeps answering other
requests, health checks and other models while a batch is searched. When a batch fails, each of its
requests is searched again alone, so one bad request cannot fail another.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from .limits import BatchLimits

Result = TypeVar("Result")
# search(lines, settings) -> one result per line, in order; runs in the executor's thread
Search = Callable[[list[str], Hashable], list[Result]]


@dataclass(eq=False)  # each job is itself (hashable by identity)
class _Job(Generic[Result]):
    """One request's lines, searched with one setting; done when every line has its result."""

    lines: list[str]
    settings: Hashable
    done: asyncio.Future
    results: dict[int, Result] = field(default_factory=dict)
    next_line: int = 0

    @property
    def waiting(self) -> bool:
        return self.next_line < len(self.lines)


class MicroBatcher(Generic[Result]):
    """Searches the lines of concurrent `submit` calls together (see the module docstring)."""

    def __init__(
        self, search: Search, executor: Executor, limits: BatchLimits, mix_requests: bool = True
    ) -> None:
        self.search, self.executor, self.limits, self.mix_requests = search, executor, limits, mix_requests
        self._queue: list[_Job[Result]] = []
        self._unanswered = 0  # submitted requests not yet answered
        self._arrived = asyncio.Event()
        self._worker: asyncio.Task | None = None

    async def submit(self, lines: Sequence[str], settings: Hashable) -> list[Result]:
        """The search's result for each line, in order, once every line has been searched."""
        if not lines:
            return []
        job: _Job[Result] = _Job(list(lines), settings, asyncio.get_running_loop().create_future())
        self._queue.append(job)
        self._arrived.set()
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._work())
        self._unanswered += 1
        try:
            results = await job.done
        finally:
            self._unanswered -= 1
        return [results[i] for i in range(len(lines))]

    async def close(self) -> None:
        """Stop the worker once every request in flight is answered."""
        while self._unanswered:
            await asyncio.sleep(self.limits.max_wait)
        if self._worker is not None:
            self._worker.cancel()

    async def _work(self) -> None:
        while True:
            await self._arrived.wait()
            self._arrived.clear()
            while self._queue:
                if not self._full():
                    await asyncio.sleep(self.limits.max_wait)  # let the requests arriving together join
                batch = self._take()
                await self._run(batch)

    def _full(self) -> bool:
        lines = sum(len(job.lines) - job.next_line for job in self._queue)
        return lines >= self.limits.max_sentences

    def _take(self) -> list[tuple[_Job[Result], int]]:
        """(job, line index) pairs of the next batch: the oldest job's setting, one line per job in turn."""
        settings = self._queue[0].settings
        jobs = [job for job in self._queue if job.settings == settings]
        if not self.mix_requests:
            jobs = jobs[:1]
        batch: list[tuple[_Job[Result], int]] = []
        while (room := self.limits.max_sentences - len(batch)) and (
            waiting := [j for j in jobs if j.waiting]
        ):
            for job in waiting[:room]:  # one line of each waiting job, oldest first
                batch.append((job, job.next_line))
                job.next_line += 1
        self._queue = [job for job in self._queue if job.waiting]
        return batch

    async def _run(self, batch: list[tuple[_Job[Result], int]]) -> None:
        loop = asyncio.get_running_loop()
        settings = batch[0][0].settings
        lines = [job.lines[i] for job, i in batch]
        try:
            results = await loop.run_in_executor(self.executor, self.search, lines, settings)
        except Exception as error:  # noqa: BLE001 - each request gets its own answer below
            jobs = list(dict.fromkeys(job for job, _ in batch))
            if len(jobs) == 1:
                _fail(jobs[0], error)
                return
            for job in jobs:  # again one request at a time: only the request that fails alone fails
                await self._run([(j, i) for j, i in batch if j is job])
            return
        for (job, i), result in zip(batch, results, strict=True):
            job.results[i] = result
            if len(job.results) == len(job.lines) and not job.done.done():
                job.done.set_result(job.results)


def _fail(job: _Job, error: Exception) -> None:
    job.next_line = len(job.lines)  # nothing of it stays queued
    if not job.done.done():
        job.done.set_exception(error)
