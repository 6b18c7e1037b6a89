"""The values a schema carries (enum and const values, property names): refused where JSON or UTF-8 cannot write them.

A lone surrogate has no UTF-8 spelling, JSON has no NaN or Infinity (`1e400` parses as infinity),
and a value nested deeper than a parser's stack is refused before anything recurses over it.
"""

from __future__ import annotations

import json
import math
import re

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
    # Nudge: this judge reads the schema as the client's validator will, not as your regex narrows it.
    # Hint 1: Go keyword by keyword: a value is valid when no keyword refuses it. The type-specific
    #   keywords look at the value only when it has their type; subschemas (anyOf's branches,
    #   items, properties) are the same question one level down.
    # Hint 2: const: same(value, const). enum: same as one entry. anyOf: satisfies one branch.
    #   type: json_type(value) among the types, an integer also a "number", a whole float also an
    #   "integer". A string: its length within minLength..maxLength, re.search(pattern, value). An
    #   array: its length within minItems..maxItems, every item satisfies items (if given). An
    #   object: every listed property it holds satisfies its schema, every required one present, no
    #   unlisted one if additionalProperties is false.
    # Hint 3:
    #   kind = json_type(value); kinds = type as a list
    #   type ok: kind in kinds or kind == "integer" and "number" in kinds
    #            or kind == "number" and "integer" in kinds and value.is_integer()
    #   string: low <= len(value) <= high and re.search(pattern, value)
    #   array: low <= len <= high and all(satisfies(item, items) for item in value)
    #   object: all(satisfies(value[k], sub) for k, sub in properties.items() if k in value), ...
    # BEGIN SOLUTION 8.5: From a schema to its regex
    kind = json_type(value)
    if "const" in schema and not same(value, schema["const"]):
        return False
    if "enum" in schema and not any(same(value, v) for v in schema["enum"]):
        return False
    if "anyOf" in schema and not any(satisfies(value, s) for s in schema["anyOf"]):
        return False
    if "type" in schema:
        kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not (kind in kinds or kind == "integer" and "number" in kinds
                or kind == "number" and "integer" in kinds and value.is_integer()):
            return False
    bounds = {"string": ("minLength", "maxLength"), "array": ("minItems", "maxItems")}.get(kind)
    if bounds and not schema.get(bounds[0], 0) <= len(value) <= schema.get(bounds[1], len(value)):
        return False
    if kind == "string" and "pattern" in schema and not re.search(schema["pattern"], value):
        return False
    if kind == "array" and "items" in schema and not all(satisfies(item, schema["items"]) for item in value):
        return False
    if kind == "object":
        properties = schema.get("properties", {})
        if any(k in value and not satisfies(value[k], sub) for k, sub in properties.items()):
            return False
        if any(k not in value for k in schema.get("required", ())):
            return False
        if schema.get("additionalProperties", True) is False and any(k not in properties for k in value):
            return False
    return True
    # END SOLUTION
# ANCHOR_END: satisfies
