"""The values a schema carries (enum and const values, property names): refused where JSON or UTF-8 cannot write them.

A lone surrogate has no UTF-8 spelling, JSON has no NaN or Infinity (`1e400` parses as infinity),
and a value nested deeper than a parser's stack is refused before anything recurses over it.
"""

from __future__ import annotations

import json
import math

from miniyaie.structured.limits import PatternError


def short(value) -> str:
    """A value as the client wrote it, cut short (and safe for one nested too deep to print)."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        text = type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def value_text(value, keyword: str) -> str:
    """The compact JSON of an enum/const value, refused if JSON cannot carry it (checked all the way down)."""
    check_value(value, keyword, 0)
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise PatternError(f"{keyword}: a value JSON cannot write ({exc})") from None


def check_value(value, keyword: str, depth: int = 0) -> None:
    """Refuse (naming keyword) a value with a lone surrogate or a non-finite number, or nested over 32 deep."""
    if depth > 32:
        raise PatternError(f"{keyword}: a value nests deeper than 32 levels")
    if isinstance(value, float) and not math.isfinite(value):
        raise PatternError(f"{keyword}: {value} is not a finite number (JSON has no NaN or Infinity)")
    if isinstance(value, str) and any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        raise PatternError(f"{keyword}: a string holds a lone surrogate (not a character UTF-8 can write)")
    if isinstance(value, list):
        for item in value:
            check_value(item, keyword, depth + 1)
    if isinstance(value, dict):
        for key, item in value.items():
            check_value(key, keyword, depth + 1)
            check_value(item, keyword, depth + 1)
