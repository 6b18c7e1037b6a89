"""The regexes of JSON's two containers, arrays and objects, from the regexes of what they hold (Task 8.3).

Compact JSON, as `json.dumps(value, separators=(",", ":"))` writes it:
exactly one comma between two elements or members, no whitespace. The
regexes given (an item's, a member's) are complete regexes that can be
written next to others as they are: none has a `|` outside a group.
json_schema.py turns a schema's `items`/`minItems`/`maxItems` and its
`properties`/`required` into the calls below; `json_object_regex` is
OpenAI's "json_object" response format: any object.
"""

from __future__ import annotations

INTEGER = r"-?(0|[1-9][0-9]*)"
NUMBER = INTEGER + r"(\.[0-9]+)?([eE][+-]?[0-9]+)?"
# A character of a JSON string: not a quote, backslash or control character; or an escape (never a
# \u escape of a lone surrogate half, which would make one character count as two).
STRING_CHAR = r'([^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u([0-9a-cA-CefEF][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2}))'
SCALARS = {"integer": INTEGER, "number": NUMBER, "boolean": "(true|false)", "null": "null"}



# ANCHOR: array_regex
def array_regex(item: str, low: int, high: int | None) -> str:
    r"""The regex of a JSON array of `low` to `high` items (`high` None: no upper bound), each matched by `item`.

    It matches "[" + ",".join(items) + "]" for every count k with
    low <= k <= high and every choice of texts that `item` matches, and no
    other text: no leading, trailing or doubled comma, no count outside the
    range. Requires 0 <= low and, when given, low <= high.
    Examples with item "[0-9]": low 0, high None: [], [1], [1,2,3];
    low 1, high 2: [1], [1,2] but not [], [1,2,3]; high 0: only [].
    Its length is at most 3 * len(item) + 40: it grows with the item's
    regex, not with `low` or `high` (200 items are not 200 copies).
    """
    # Idea: which item is the one not preceded by a comma, and what is left when there may be none?
    # Stuck? `miniyaie hint 8.3` prints hints, one level at a time.
    # TODO(Task 8.3): Arrays and objects. Replace this line with your code.
    raise NotImplementedError('Chapter 8, Task 3: Arrays and objects — see book/src/ch08_structured_output.md')
# ANCHOR_END: array_regex


# ANCHOR: object_regex
def object_regex(members: list[tuple[str, bool]]) -> str:
    r"""The regex of a JSON object whose members come in this order, each present or, if optional, absent.

    members: (regex of one `"key":value` member, required?) in the schema's
    order. It matches "{" + ",".join(the members written) + "}" for every
    choice of optional members left out (required ones always written, the
    order kept), and no other text: no leading, trailing, doubled or missing
    comma, no member out of order. Examples, with members A (required) and
    B, C (optional): {A}, {A,B}, {A,C}, {A,B,C}; not {}, {,A}, {A,}, {A,,B},
    {B,A}. No members: only {}.
    Size: n members with 2^n choices must not give a regex of 2^n parts.
    Its length is at most n * (the total length of the members' regexes)
    + 6 * n**2 + 8: no member's regex written more than n times. The
    compiler's time follows the regex's length.
    """
    # Idea: list the texts of three optional members by hand: where may a comma stand, and what decides it?
    # Stuck? `miniyaie hint 8.3` prints hints, one level at a time.
    # TODO(Task 8.3): Arrays and objects. Replace this line with your code.
    raise NotImplementedError('Chapter 8, Task 3: Arrays and objects — see book/src/ch08_structured_output.md')
# ANCHOR_END: object_regex


# ANCHOR: json_object_regex
def json_object_regex(depth: int = 2) -> str:
    r"""Any compact JSON object (OpenAI's "json_object" response format) whose values nest at most `depth` levels.

    Strings: any JSON string whose characters STRING_CHAR matches (escapes
    included); numbers as NUMBER; true, false, null; objects with
    any keys, in any order, repeats allowed. An object or array holding only scalars (or nothing) is one
    level; `depth` counts the levels of the top object's values, not the object: with depth 2, {} and
    {"a":[{"b":1}],"c":{}} (its value [{"b":1}] is two levels) match, {"a":[[[1]]]} does not. Only
    objects at the top: not [1], not "x". Its length grows with depth, and by a
    constant factor per level, never with the number of members.
    """
    # Idea: a regex cannot recurse, and may grow only by a constant factor per level: what is each level made of?
    # Stuck? `miniyaie hint 8.3` prints hints, one level at a time.
    # TODO(Task 8.3): Arrays and objects. Replace this line with your code.
    raise NotImplementedError('Chapter 8, Task 3: Arrays and objects — see book/src/ch08_structured_output.md')
# ANCHOR_END: json_object_regex
