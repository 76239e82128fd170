"""Progress of long work, as one small protocol every layer can call (issue 48).

A loop says how much work it has and how far it is; whoever runs it decides where that goes (a job's
`progress.json`, a progress bar, nowhere). Code that reports knows nothing about runs, jobs or pages:

    from interplab.core import progress

    with progress.task(len(cells), "cells", phase="resid_pre") as t:   # total and unit of this loop
        for chunk in chunks:
            ...
            t.advance(len(chunk))                                      # or progress.advance(len(chunk))

    with progress.reporting_to(sink):      # sink(Snapshot) receives every change (the caller throttles)
        activation_patching(...)

Tasks nest. A nested task with the same unit as the task around it counts into that task (activation patching
opens one "cells" task over every site kind; each site's grid opens its own "cells" task and simply advances the
outer one), so the outermost total is the whole job's. A nested task with another unit is shown as a sub-task
(e.g. `models 1/4` with `cells 1200/12600` below it). Without a sink nothing is recorded beyond a few integers, so a
script pays nothing for the calls.
"""
from __future__ import annotations

import contextlib
import contextvars
import time
from dataclasses import dataclass
from typing import Callable, Iterator

__all__ = ["TaskState", "Snapshot", "WorkSize", "task", "track", "advance", "set_phase", "reporting_to", "current"]


@dataclass(frozen=True)
class WorkSize:
    """How big a piece of work is, known before it starts (what a page shows before launching a job).

    units / unit: what its progress counts (cells, steps, prompts); forwards: model forward passes (batch rows);
    tokens: tokens through the model; flops: approximate floating-point operations of the main loop (0 = unknown),
    from which a measured FLOP rate gives a first estimate; detail: how the numbers come about, one line."""

    units: int
    unit: str
    forwards: int = 0
    tokens: int = 0
    flops: float = 0.0
    detail: str = ""

    def describe(self) -> str:
        parts = [f"{self.units:,} {self.unit}"]
        if self.forwards:
            parts.append(f"{self.forwards:,} forwards")
        if self.tokens:
            parts.append(f"{self.tokens:,} tokens")
        return " · ".join(parts)


@dataclass(frozen=True)
class TaskState:
    """One level of work: `done` of `total` `unit`s, the current `phase` label, and the measured rate."""

    unit: str
    done: int
    total: int
    phase: str
    elapsed_s: float

    @property
    def fraction(self) -> float | None:
        return None if self.total <= 0 else min(1.0, self.done / self.total)

    @property
    def rate(self) -> float | None:
        """Units per second since the task started (None before the first unit is done)."""
        return self.done / self.elapsed_s if self.done > 0 and self.elapsed_s > 0 else None

    @property
    def eta_s(self) -> float | None:
        """Seconds left at the measured rate (None until there is a rate)."""
        r = self.rate
        return None if r is None or self.total <= 0 else max(0.0, (self.total - self.done) / r)

    def as_dict(self) -> dict:
        return {"unit": self.unit, "done": self.done, "total": self.total, "phase": self.phase,
                "elapsed_s": round(self.elapsed_s, 3), "fraction": self.fraction,
                "rate": None if self.rate is None else round(self.rate, 6),
                "eta_s": None if self.eta_s is None else round(self.eta_s, 1)}


@dataclass(frozen=True)
class Snapshot:
    """Every open task, outermost first (the outermost is the whole work's progress)."""

    tasks: tuple[TaskState, ...]

    @property
    def main(self) -> TaskState | None:
        return self.tasks[0] if self.tasks else None

    @property
    def finished(self) -> bool:
        m = self.main
        return m is not None and m.total > 0 and m.done >= m.total


class _Task:
    def __init__(self, total: int, unit: str, phase: str):
        self.total, self.unit, self.phase = int(total), str(unit), str(phase)
        self.done = 0
        self.start = time.perf_counter()

    def state(self) -> TaskState:
        return TaskState(self.unit, self.done, self.total, self.phase, time.perf_counter() - self.start)


class Handle:
    """What `task()` yields: advance it, set its absolute count, or relabel its phase."""

    def __init__(self, target: _Task | None):
        self._t = target

    def advance(self, n: int = 1) -> None:
        if self._t is not None:
            self._t.done += int(n)
            _emit()

    def update(self, done: int, total: int | None = None) -> None:
        """Set the count (for code that reports absolute steps, e.g. a training callback)."""
        if self._t is not None:
            self._t.done = int(done)
            if total is not None:
                self._t.total = int(total)
            _emit()

    def phase(self, label: str) -> None:
        if self._t is not None:
            self._t.phase = str(label)
            _emit()


_STACK: contextvars.ContextVar[tuple] = contextvars.ContextVar("interplab_progress_stack", default=())
_SINK: contextvars.ContextVar[Callable | None] = contextvars.ContextVar("interplab_progress_sink", default=None)


def _emit() -> None:
    sink = _SINK.get()
    if sink is not None:
        sink(current())


def current() -> Snapshot:
    return Snapshot(tuple(t.state() for t in _STACK.get()))


@contextlib.contextmanager
def task(total: int, unit: str = "steps", phase: str = "") -> Iterator[Handle]:
    """Open a unit of work of `total` `unit`s (see the module docstring for nesting)."""
    stack = _STACK.get()
    if stack and stack[-1].unit == unit:  # same unit: the task around it owns the count
        outer = stack[-1]
        before = outer.phase
        if phase:
            outer.phase = phase
        try:
            yield Handle(outer)
        finally:
            outer.phase = before
        return
    t = _Task(total, unit, phase)
    token = _STACK.set(stack + (t,))
    _emit()
    try:
        yield Handle(t)
    finally:
        _STACK.reset(token)
        _emit()


def track(items, unit: str = "items", *, label: Callable[[object], str] | None = None) -> Iterator:
    """Iterate over `items` as one task (a loop's one-line progress): `for name in track(models, "models"):`.
    label(item) names the phase while that item is worked on."""
    items = items if hasattr(items, "__len__") else list(items)
    with task(len(items), unit) as bar:
        for x in items:
            if label is not None:
                bar.phase(label(x))
            yield x
            bar.advance()


def advance(n: int = 1) -> None:
    """Advance the innermost open task by `n` (nothing when no task is open)."""
    stack = _STACK.get()
    if stack:
        stack[-1].done += int(n)
        _emit()


def set_phase(label: str) -> None:
    """Relabel the innermost open task's phase (e.g. which method of the atlas is running)."""
    stack = _STACK.get()
    if stack:
        stack[-1].phase = str(label)
        _emit()


@contextlib.contextmanager
def reporting_to(sink: Callable[[Snapshot], None]) -> Iterator[None]:
    """Send every progress change inside the block to `sink(Snapshot)`; tasks opened before stay out of it."""
    token_sink = _SINK.set(sink)
    token_stack = _STACK.set(())
    try:
        yield
    finally:
        _STACK.reset(token_stack)
        _SINK.reset(token_sink)
