"""What one request may ask of the pattern compiler: caps checked before any work, and a budget checked during it.

A pattern is client input. `a{1000000}` is 11 characters and a million
automaton states; `(a|b)*a(a|b){14}` is short and 2^15 states. So every
size a request names (repetition counts, string lengths, item counts, enum
entries) is held against a cap before compiling, and the compile itself
runs under a budget: a deadline, a cap on automaton states, and an event
that cancels it (the client went away), checked inside its loops. Over a
cap, a PatternError (HTTP 400) names the keyword and the limit.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, fields

from miniyaie.engine.errors import InvalidRequestError


class PatternError(InvalidRequestError):
    """A regex or schema that cannot constrain output: invalid, unsupported, over a limit, or matching nothing."""


class CompileCancelled(Exception):
    """The compile was stopped because its request was cancelled (not the client's mistake: no 400)."""


@dataclass(frozen=True)
class Limits:
    """The caps; the operator changes them with `miniyaie serve --structured-limit NAME=VALUE`."""

    max_repeat: int = 1000  # a regex's {n,m} counts
    max_string_length: int = 500  # a schema's minLength / maxLength
    max_items: int = 256  # a schema's minItems / maxItems
    max_enum: int = 1000  # entries of an enum or guided_choice
    max_regex_length: int = 100_000  # characters of the regex a request compiles to
    max_states: int = 20_000  # states of the automaton (character and byte level)
    max_class_chars: int = 5_000  # characters a regex's [...] class names one by one
    compile_seconds: float = 10.0  # the compile's deadline, checked in its loops
    cache_bytes: int = 256 * 2**20  # bytes of compiled indexes kept for reuse (least recently used go first)

    def __post_init__(self):
        for field in fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"structured limit {field.name} must be a positive number, got {value!r}")

    @classmethod
    def parse(cls, settings: dict | None) -> Limits:
        """Limits from {name: value} (a CLI's NAME=VALUE pairs, values as text or numbers)."""
        known = {f.name: f.type for f in fields(cls)}
        values = {}
        for name, value in (settings or {}).items():
            if name not in known:
                raise ValueError(f"unknown structured limit {name!r}; choose from {', '.join(known)}")
            try:
                values[name] = (float if name == "compile_seconds" else int)(value)
            except (TypeError, ValueError):
                raise ValueError(f"structured limit {name} must be a number, got {value!r}") from None
        return cls(**values)


def over(keyword: str, value, limit: int, name: str) -> PatternError:
    """The refusal of a size over its cap: it names the keyword, the size asked for, the limit and its setting."""
    return PatternError(f"{keyword} {value} is over the limit of {limit} (structured limit {name})")


class Budget:
    """One compile's allowance: a deadline, an automaton-state cap and a cancel event, checked cooperatively."""

    def __init__(self, limits: Limits, cancel: threading.Event | None = None):
        self.limits, self.cancel = limits, cancel
        self.deadline = time.monotonic() + limits.compile_seconds

    def check(self, states: int = 0) -> None:
        """Raise if the compile must stop now: cancelled, past its deadline, or grown past max_states."""
        if self.cancel is not None and self.cancel.is_set():
            raise CompileCancelled("the request was cancelled while its pattern compiled")
        if states > self.limits.max_states:
            raise over("the pattern's automaton: states", f"{states}+", self.limits.max_states, "max_states")
        if time.monotonic() > self.deadline:
            raise PatternError(f"the pattern took longer than the compile budget of {self.limits.compile_seconds} s "
                               f"(compile_seconds); make it simpler")


_current = threading.local()


def current_budget() -> Budget | None:
    """The budget of the compile running on this thread (read by the automaton builder's loops)."""
    return getattr(_current, "budget", None)


class running_under:
    """`with running_under(budget):` makes `budget` this thread's current one."""

    def __init__(self, budget: Budget | None):
        self.budget = budget

    def __enter__(self):
        self.previous, _current.budget = current_budget(), self.budget
        return self.budget

    def __exit__(self, *exc):
        _current.budget = self.previous
