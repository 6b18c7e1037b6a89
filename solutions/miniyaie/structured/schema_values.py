"""The values a schema carries (enum and const values, property names): refused where JSON or UTF-8 cannot write them.

A lone surrogate has no UTF-8 spelling, JSON has no NaN or Infinity (`1e400` parses as infinity),
and a value nested deeper than a parser's stack is refused before anything recurses over it.
"""

from __future__ import annotations

import json
import math

from miniyaie.structured.limits import PatternError

MAX_VALUE_DEPTH = 32


def short(value) -> str:
    """A value as the client wrote it, cut short (and safe for one nested too deep to print)."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        text = type(value).__name__
    if not text.isascii():  # a lone surrogate has no UTF-8 spelling: a message quoting it could not be sent
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = json.dumps(value)  # every non-ASCII character as its \u escape
    return text if len(text) <= 60 else text[:57] + "..."


def json_type(value) -> str:
    """The JSON Schema type of a value JSON can write: "boolean" for True, "integer" for 3, "number" for 1.5, ..."""
    for kind, types in (("boolean", bool), ("integer", int), ("number", float), ("string", str), ("null", type(None)),
                        ("array", list), ("object", dict)):
        if isinstance(value, types):
            return kind
    return type(value).__name__


# ANCHOR: check_value
def check_value(value, keyword: str, depth: int = 0) -> None:
    """Refuse a value that JSON or UTF-8 cannot write; return None for any other.

    Refused, with a PatternError whose message starts with `keyword`:
    a string (a dict's key included) holding a lone surrogate (U+D800 to
    U+DFFF: no UTF-8 spelling), a float that is not finite (NaN, infinity:
    JSON has neither, and "1e400" parses as infinity), and anything more
    than MAX_VALUE_DEPTH levels down (the value itself sits at `depth`, each
    item of a list and each key and value of a dict one level below it).
    Nothing else is raised, however deep the value: one nested 100,000
    lists deep is refused as too deep (a PatternError, not a RecursionError).
    The message names the problem in words ("surrogate" for a lone
    surrogate) and is text UTF-8 can write (str(error).encode("utf-8")
    works): a 400's body carries it, so it never quotes a lone surrogate raw.
    Examples: [1, "a", {"k": None}] passes; [1.5, float("inf")] and
    {"\\ud800": 1} are refused; 32 nested lists around 1 pass, 33 do not.
    """
    # Nudge: how deep does your walk go on a value a client built to be deep?
    # Hint 1: Walk the value: every string and every float is checked where it sits, and
    #   lists and dicts pass the walk on to their items (a dict's keys are strings too).
    #   The depth is the one thing to check first: a value too deep is refused on arrival,
    #   before looking inside it, so the walk never goes more than MAX_VALUE_DEPTH + 1
    #   calls down, whatever the client sent.
    # Hint 2: If depth > MAX_VALUE_DEPTH: refuse. A float: refuse unless math.isfinite. A
    #   string: refuse if any character's code point is in 0xD800..0xDFFF. A list: check
    #   each item at depth + 1. A dict: check each key and each value at depth + 1.
    #   Start every message with the keyword, and describe the value rather than quote it
    #   (a surrogate in the message would make the reply itself unwritable).
    # Hint 3:
    #   if depth > MAX_VALUE_DEPTH: raise PatternError(f"{keyword}: a value nests deeper than ...")
    #   if float and not math.isfinite(value): raise PatternError(f"{keyword}: ... not a finite number")
    #   if str and any(0xD800 <= ord(c) <= 0xDFFF for c in value): raise PatternError(f"{keyword}: ... surrogate")
    #   if list: for item in value: check_value(item, keyword, depth + 1)
    #   if dict: for key, item in value.items(): check_value(key, ..., depth + 1); check_value(item, ..., depth + 1)
    # BEGIN SOLUTION 8.4: The values a schema carries
    if depth > MAX_VALUE_DEPTH:
        raise PatternError(f"{keyword}: a value nests deeper than {MAX_VALUE_DEPTH} levels")
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
    # END SOLUTION
# ANCHOR_END: check_value


def value_text(value, keyword: str) -> str:
    """The compact JSON of an enum/const value, refused if JSON cannot carry it (checked all the way down)."""
    check_value(value, keyword, 0)
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise PatternError(f"{keyword}: a value JSON cannot write ({exc})") from None
