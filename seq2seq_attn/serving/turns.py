"""Turns: the searches of one model share its cores fairly, taking turns between their steps.

A server searches each batch in a thread of its own (serving/batching.py), but only one of them computes
at a time, the one whose turn it is: they share the model's cores, and two computing at once would only
slow each other. Before each step of its search (decoding/search.py's `between_steps`; a scoring: before
each pair it forces through the model) the search in turn hands over to a waiting search that has had
less of the model's time, counted per request it serves: every request waiting on the model gets an
equal share of it (weighted fair queuing). A one-sentence request therefore waits for the steps of the
requests in flight, each one step at a time, not for whole searches of another client's long request; a
long request still gets its share while short ones keep coming.

The time a search has had, `used`, grows by the seconds it computes divided by its weight (the requests
its batch serves). A search that joins starts from the least `used` among those already running, so it
neither waits until they have caught up with it nor keeps the turn until it has caught up with them.

A search can be cancelled, by its clients leaving or the server stopping: it stops before its next step
(`Cancelled`), or before its first if it is still waiting for one.
"""

from __future__ import annotations

import threading
import time


class Cancelled(Exception):
    """A search stopped between two steps: nobody waits for its results any longer."""


class Turns:
    """The turns of one model's searches (module docstring)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()  # guards everything below; notified when the turn is free
        self._running: list[Turn] = []  # joined and not yet left, in the order they joined
        self._holder: Turn | None = None

    def turn(self, weight: int = 1) -> Turn:
        """A turn for a search serving `weight` requests; `with turn:` in the search's thread takes part."""
        return Turn(self, weight)

    def _next(self) -> Turn | None:
        """The search that should compute now: the one that has had the least (the earliest on a tie)."""
        waiting = [turn for turn in self._running if not turn.cancelled]
        return min(waiting, key=lambda turn: turn.used, default=None)

    def join(self, turn: Turn) -> None:
        """Take part, and wait for the first turn."""
        with self._changed:
            turn.used = min((other.used for other in self._running), default=0.0)
            self._running.append(turn)
            self._wait_for(turn)

    def _wait_for(self, turn: Turn) -> None:
        """Block until it is `turn`'s to compute (called with the lock held)."""
        while not turn.cancelled and not (self._holder is None and self._next() is turn):
            self._changed.wait()
        if turn.cancelled:
            raise Cancelled
        self._holder, turn.since = turn, time.monotonic()

    def step(self, turn: Turn) -> None:
        """Between two steps of `turn`'s search: hand over if another search is due, and wait for the turn
        back; `Cancelled` if the search was cancelled."""
        with self._changed:
            self._count(turn)
            if turn.cancelled or self._next() is not turn:
                self._hand_over()
                self._wait_for(turn)

    def leave(self, turn: Turn) -> None:
        with self._changed:
            if self._holder is turn:
                self._count(turn)
                self._hand_over()
            self._running.remove(turn)
            self._changed.notify_all()

    def _count(self, turn: Turn) -> None:
        """Add the time `turn` has computed since it last got the turn, over its weight."""
        now = time.monotonic()
        turn.used += (now - turn.since) / turn.weight
        turn.since = now

    def _hand_over(self) -> None:
        self._holder = None
        self._changed.notify_all()

    def cancel(self, turn: Turn) -> None:
        """Stop `turn`'s search before its next step (or its first)."""
        with self._changed:
            turn.cancelled = True
            self._changed.notify_all()


class Turn:
    """One search's part in its model's turns: entered (`with`) in the search's thread, `step` called
    before each step of the search, `cancel` from anywhere."""

    def __init__(self, turns: Turns, weight: int) -> None:
        self.turns, self.weight = turns, max(1, weight)
        self.used = 0.0  # seconds computed over the weight, on the scale of the searches running with it
        self.since = 0.0  # when it last got the turn
        self.cancelled = False

    def __enter__(self) -> Turn:
        self.turns.join(self)
        return self

    def __exit__(self, *_: object) -> None:
        self.turns.leave(self)

    def step(self) -> None:
        self.turns.step(self)

    def cancel(self) -> None:
        self.turns.cancel(self)
