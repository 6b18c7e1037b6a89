"""The values a schema carries (enum and const values, property names): refused where JSON or UTF-8 cannot write them.

A lone surrogate has no UTF-8 spelling, JSON has no NaN or Infinity (`1e400` parses as infinity),
and a value nested deeper than a parser's stack is refused before anything recurses over it.
"""

from __future__ import annotations

import json

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
    # Idea: how deep does your walk go on a value a client built to be deep?
    # Stuck? `miniyaie hint 8.4` prints hints, one level at a time.
    # TODO(Task 8.4): The values a schema carries. Replace this line with your code.
    raise NotImplementedError('Chapter 8, Task 4: The values a schema carries — see book/src/ch08_structured_output.md')
# ANCHOR_END: check_value


def value_text(value, keyword: str) -> str:
    """The compact JSON of an enum/const value, refused if JSON cannot carry it (checked all the way down)."""
    check_value(value, keyword, 0)
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise PatternError(f"{keyword}: a value JSON cannot write ({exc})") from None


def same(a, b) -> bool:
    """JSON equality, as enum and const compare: true is not 1, 1 is 1.0, lists and objects member by member."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


# ANCHOR: satisfies
def satisfies(value, schema: dict) -> bool:
    """Whether JSON Schema finds `value` valid under `schema` (the keywords json_schema.py supports).

    How enum and const values are filtered: a value is kept exactly when this says yes, so the regex
    never matches a value jsonschema refuses and never drops one it accepts. As JSON Schema reads them:
    each keyword applies to the values of its types only (minLength to strings, minItems to arrays,
    properties to objects: {"type": "string", "minItems": 3} allows every string); "integer" includes
    1.0 and "number" includes the integers, but true and false are neither; lengths count characters
    (minLength, maxLength); a pattern is searched for, not matched whole ("b" allows "abc"); const and
    enum compare as `same` does, all the way down (true is not 1, [true] is not [1]); an object may
    hold properties its schema does not list, unless additionalProperties is false; an array without
    items may hold anything; subschemas (properties, items, anyOf's branches) judge as the schema does.
    `schema` has passed schema_to_regex's checks (keywords known and of the right kind). Examples:
    1.0 satisfies {"type": "integer"}, 1 {"type": "number"}, "é" {"maxLength": 1}, {"a": 1}
    {"type": "object"}; true does not satisfy {"type": "integer"}, nor 1 {"enum": [true]}.
    """
    # Idea: this judge reads the schema as the client's validator will, not as your regex narrows it.
    # Stuck? `miniyaie hint 8.5` prints hints, one level at a time.
    # TODO(Task 8.5): From a schema to its regex. Replace this line with your code.
    raise NotImplementedError('Chapter 8, Task 5: From a schema to its regex — see book/src/ch08_structured_output.md')
# ANCHOR_END: satisfies
