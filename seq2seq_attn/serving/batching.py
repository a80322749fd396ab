"""Micro-batching: the sentences of requests that arrive together are searched as one batch.

A beam search over 32 sentences costs little more than over one on a CPU's vector units (and far less
than 32 searches), so a server that searched each request alone would waste most of its time. Requests
wait in a queue; a batch takes up to `max_sentences` sentences from the waiting requests, one sentence
from each request in turn, so a request of 64 sentences shares every batch with the requests that arrive
behind it instead of making them wait for all of its sentences. A batch is started as soon as it is
full, or `max_wait` seconds after its first sentence arrived.

Lanes: a sentence waits in the lane of its length (up to 64 characters, then up to 4 times as many in
each lane above: `lane`) and of its request's settings (n-best, attention), and a batch takes sentences
of one lane, so a short sentence's answer never waits for a sentence many times its length to be
searched (a batch is answered when its last sentence ends), nor for the requests of other settings,
whose batches take turns with its own. A batch's work is bounded: its sentences times its longest
sentence's characters times the beam searched stay within `max_chars` (a long sentence at a wide beam may
make a batch alone).
The search cuts a batch further by `decode.batch_tokens`, as it cuts a file's.

Each lane searches one batch at a time, in a thread of the model's executor; the batches of the lanes
take turns between their search steps (serving/turns.py), so a short request is answered while a long
one is searched, each request getting an equal share of the model. A request whose client left
(`submit` cancelled) has its waiting sentences dropped, and a batch that no longer serves anyone is
stopped before its next step; `stop` answers every request in flight with an error and stops every
search (a server stopping).

The fp32 search is batch-invariant: a sentence gets the same translations alone or among others (the
search keeps each sentence's rows apart and compares nothing across sentences), its scores equal to the
last float bits (matrix kernels pick their blocking by row count). The int8 copy
quantises each batch's activations with one scale, so there a sentence's answer can depend on its
neighbours: `mix_requests=False` keeps every batch to one request's sentences (what `seq2seq translate`
does with the same lines), and the server sets it for int8 models unless asked to mix.

When a batch fails, each of its requests is searched again alone, so one bad request cannot fail another.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from ..decoding.search import between_steps
from .limits import BatchLimits
from .turns import Cancelled, Turn, Turns

Result = TypeVar("Result")
# search(lines, settings) -> one result per line, in order; runs in a thread of the executor
Search = Callable[[list[str], Hashable], list[Result]]
SHORTEST_LANE = 64  # characters of the longest sentence in lane 0
LANE_GROWTH = 4  # each lane's longest sentence, over the lane's below: typical sentences share two lanes


def lane(sentence: str) -> int:
    """The lane of a sentence: 0 up to SHORTEST_LANE characters, k up to SHORTEST_LANE * LANE_GROWTH**k."""
    number, longest = 0, SHORTEST_LANE
    while len(sentence) > longest:
        number, longest = number + 1, longest * LANE_GROWTH
    return number


@dataclass(eq=False)  # each job is itself (hashable by identity)
class _Job(Generic[Result]):
    """One request's lines, searched with one setting; done when every line has its result."""

    lines: list[str]
    settings: Hashable
    done: asyncio.Future
    results: dict[int, Result] = field(default_factory=dict)
    waiting: dict[Hashable, deque[int]] = field(default_factory=dict)  # (lane, settings) -> lines not batched

    @property
    def wanted(self) -> bool:
        """Whether anyone still waits for its results."""
        return not self.done.done()


@dataclass(eq=False)
class _Batch(Generic[Result]):
    """(job, line index) pairs searched together, and the search's turn."""

    lines: list[tuple[_Job[Result], int]]
    turn: Turn


class MicroBatcher(Generic[Result]):
    """Searches the lines of concurrent `submit` calls together (see the module docstring). `width`
    gives the beam a setting searches with, for the bound on a batch's work."""

    def __init__(
        self,
        search: Search,
        executor: Executor,
        limits: BatchLimits,
        mix_requests: bool = True,
        turns: Turns | None = None,
        width: Callable[[Hashable], int] = lambda settings: 1,
    ) -> None:
        self.search, self.executor, self.limits, self.mix_requests = search, executor, limits, mix_requests
        self.turns, self.width = turns or Turns(), width
        self._queue: list[_Job[Result]] = []  # jobs with lines not yet in a batch, oldest first
        self._jobs: set[_Job[Result]] = set()  # every job not yet answered
        self._lanes: dict[Hashable, asyncio.Task] = {}  # the lanes searching, each one batch at a time
        self._running: set[_Batch[Result]] = set()

    async def submit(self, lines: Sequence[str], settings: Hashable) -> list[Result]:
        """The search's result for each line, in order, once every line has been searched. Cancelled
        (its client left), it drops its waiting lines and stops the searches that serve only it."""
        if not lines:
            return []
        job: _Job[Result] = _Job(list(lines), settings, asyncio.get_running_loop().create_future())
        for i, line in enumerate(job.lines):
            job.waiting.setdefault((lane(line), settings), deque()).append(i)
        self._queue.append(job)
        self._jobs.add(job)
        for key in job.waiting:
            if key not in self._lanes:
                self._lanes[key] = asyncio.create_task(self._search_lane(key))
        try:
            results = await job.done
        except asyncio.CancelledError:
            self._drop(job)
            raise
        finally:
            self._jobs.discard(job)
        return [results[i] for i in range(len(lines))]

    def stop(self, error: Exception) -> None:
        """Answer every request in flight with `error` and stop every search (a server stopping)."""
        for job in list(self._jobs):
            _fail(job, error)
        self._queue.clear()
        for batch in self._running:
            batch.turn.cancel()

    async def close(self) -> None:
        """Return once every request in flight is answered and every lane has stopped."""
        while self._jobs or self._lanes:
            await asyncio.sleep(self.limits.max_wait or 0.001)

    def _drop(self, job: _Job[Result]) -> None:
        job.waiting.clear()
        if not job.done.done():
            job.done.cancel()
        self._queue = [other for other in self._queue if other is not job]
        for batch in self._running:
            if not any(other.wanted for other, _ in batch.lines):
                batch.turn.cancel()

    async def _search_lane(self, key: Hashable) -> None:
        """Search the lane's waiting lines, batch after batch, until none waits."""
        try:
            while self._waiting(key):
                if self._waiting(key) < self.limits.max_sentences:
                    await asyncio.sleep(self.limits.max_wait)  # let the requests arriving together join
                if batch := self._take(key):
                    await self._run(batch)
        finally:
            del self._lanes[key]

    def _waiting(self, key: Hashable) -> int:
        return sum(len(job.waiting.get(key, ())) for job in self._queue)

    def _take(self, key: Hashable) -> list[tuple[_Job[Result], int]]:
        """(job, line index) pairs of the lane's next batch (its jobs share one setting): one line per job
        in turn, within `max_sentences` and `max_chars` (sentences x longest x beam; at least one line)."""
        jobs = [job for job in self._queue if job.waiting.get(key)][: None if self.mix_requests else 1]
        if not jobs:
            return []
        width = self.width(jobs[0].settings)
        batch: list[tuple[_Job[Result], int]] = []
        longest = 0
        while waiting := [job for job in jobs if job.waiting.get(key)]:
            for job in waiting:  # one line of each waiting job, oldest first
                i = job.waiting[key][0]
                wider = max(longest, len(job.lines[i]))
                if batch and (
                    len(batch) == self.limits.max_sentences
                    or (len(batch) + 1) * wider * width > self.limits.max_chars
                ):
                    return self._taken(batch)
                batch.append((job, job.waiting[key].popleft()))
                longest = wider
        return self._taken(batch)

    def _taken(self, batch: list[tuple[_Job[Result], int]]) -> list[tuple[_Job[Result], int]]:
        self._queue = [job for job in self._queue if any(job.waiting.values())]
        return batch

    async def _run(self, lines: list[tuple[_Job[Result], int]]) -> None:
        jobs = list(dict.fromkeys(job for job, _ in lines))
        batch = _Batch(lines, self.turns.turn(weight=len(jobs)))
        settings = jobs[0].settings
        self._running.add(batch)
        try:
            results = await asyncio.get_running_loop().run_in_executor(
                self.executor, self._search_in_turn, batch.turn, [job.lines[i] for job, i in lines], settings
            )
        except Cancelled:  # its clients left, or the server stops: nobody waits for it
            return
        except Exception as error:  # noqa: BLE001 - each request gets its own answer below
            if len(jobs) == 1:
                _fail(jobs[0], error)
                return
            # again one request at a time (of those still wanted): only the request that fails alone fails
            for job in [job for job in jobs if job.wanted]:
                await self._run([(j, i) for j, i in lines if j is job])
            return
        finally:
            self._running.discard(batch)
        for (job, i), result in zip(lines, results, strict=True):
            job.results[i] = result
            if len(job.results) == len(job.lines) and not job.done.done():
                job.done.set_result(job.results)

    def _search_in_turn(self, turn: Turn, lines: list[str], settings: Hashable) -> list[Result]:
        """The search of one batch, in its thread, computing only in its turns."""
        with turn, between_steps(turn.step):
            return self.search(lines, settings)


def _fail(job: _Job, error: Exception) -> None:
    job.waiting.clear()  # nothing of it stays queued
    if not job.done.done():
        job.done.set_exception(error)
