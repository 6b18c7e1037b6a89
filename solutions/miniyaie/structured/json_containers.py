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
    # Nudge: which item is the one not preceded by a comma, and what is left when there may be none?
    # Hint 1: Every item but the first comes after a comma. So an array with at least one
    #   item is one item followed by some number of ",item": the count of those is one less
    #   than the count of items. A repetition count {m,n} says how many without copying the
    #   item's regex. The empty array is the case with no first item at all.
    # Hint 2: If high is 0, only "\[\]". Otherwise the body is item + "(," + item + "){a,b}"
    #   with a = max(low - 1, 0) and b = high - 1 (nothing after the comma in {a,} when there
    #   is no high). If low is 0 the whole body is optional: wrap it in "(...)?". Put the
    #   brackets around it, escaped.
    # Hint 3:
    #   if high == 0: return r"\[\]"
    #   more = "(," + item + "){" + str(max(low - 1, 0)) + "," + ("" if high is None else str(high - 1)) + "}"
    #   body = item + more
    #   if low == 0: body = "(" + body + ")?"
    #   return r"\[" + body + r"\]"
    # BEGIN SOLUTION 8.3: Arrays and objects
    if high == 0:
        return r"\[\]"
    more = f"(,{item}){{{max(low - 1, 0)},{'' if high is None else high - 1}}}"
    body = item + more
    return r"\[" + (body if low > 0 else f"({body})?") + r"\]"
    # END SOLUTION
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
    # Nudge: list the texts of three optional members by hand: where may a comma stand, and what decides it?
    # Hint 1: Read the members left to right and carry one regex: "the members so far, at
    #   least one of them written" (commas correct inside it), plus one fact: "could every
    #   member so far have been left out?" (true until the first required member). The
    #   object is that regex, made optional if all members could be absent. Each step
    #   writes the new member's regex at most twice and the carried regex once, so the
    #   length grows linearly. (Spelling out "with or without" for each optional member
    #   copies everything after it twice: 2^n.)
    # Hint 2: Call the carried regex S (None before the first member). For member m:
    #   if S is None, S = m. Otherwise, if every earlier member is optional (nothing may be
    #   written yet): a required m gives "(S,)?m"; an optional m gives "(S(,m)?|m)" (m
    #   after something, or m first, or nothing new). If some earlier member is required,
    #   something is already written: "S,m" (required) or "S(,m)?" (optional). At the end:
    #   "\{" + S + "\}", with S wrapped in "(...)?" if every member is optional; "\{\}" for
    #   no members. (Also within the contract, and quadratic: an alternation over which
    #   member is written first, each followed by the rest, a comma before each.)
    # Hint 3:
    #   carried, all_optional = None, True
    #   for m, required in members:
    #       if carried is None: carried = m
    #       elif all_optional: carried = "(" + carried + ",)?" + m if required else "(" + carried + "(," + m + ")?|" + m + ")"
    #       else: carried = carried + "," + m if required else carried + "(," + m + ")?"
    #       all_optional = all_optional and not required
    #   if carried is None: return r"\{\}"
    #   return r"\{" + ("(" + carried + ")?" if all_optional else carried) + r"\}"
    # BEGIN SOLUTION 8.3: Arrays and objects
    carried, all_optional = None, True
    for member, required in members:
        if carried is None:
            carried = member
        elif all_optional:
            carried = f"({carried},)?{member}" if required else f"({carried}(,{member})?|{member})"
        else:
            carried = f"{carried},{member}" if required else f"{carried}(,{member})?"
        all_optional = all_optional and not required
    if carried is None:
        return r"\{\}"
    return r"\{" + (f"({carried})?" if all_optional else carried) + r"\}"
    # END SOLUTION
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
    # Nudge: a regex cannot recurse, and may grow only by a constant factor per level: what is each level made of?
    # Hint 1: A value that nests at most 0 levels is a scalar. A value that nests at most
    #   k + 1 levels is a value of at most k levels, or an object or array whose members
    #   and items are values of at most k levels. The answer is an object whose values
    #   nest at most `depth` levels. Build the regex level by level (a loop), each level
    #   from the one below it, and group every alternation.
    # Hint 2: string = '"' + STRING_CHAR + '*"'; value = the scalars joined with "|". Then
    #   depth times: inner = "(" + value + ")"; object = \{ + optional (string:inner then
    #   any number of ,string:inner) + \}; array = \[ + optional (inner then any number of
    #   ,inner) + \]; value = value | object | array. Finally the object of values:
    #   \{ + optional (string:(value) then any number of ,string:(value)) + \}.
    # Hint 3:
    #   string = f'"{STRING_CHAR}*"'; value = "|".join([string, NUMBER, "true", "false", "null"])
    #   repeat depth times:
    #       inner = f"({value})"
    #       obj = r"\{(" + string + ":" + inner + "(," + string + ":" + inner + r")*)?\}"
    #       arr = r"\[(" + inner + "(," + inner + r")*)?\]"
    #       value = f"{value}|{obj}|{arr}"
    #   return r"\{(" + string + ":(" + value + ")(," + string + ":(" + value + r"))*)?\}"
    # BEGIN SOLUTION 8.3: Arrays and objects
    string = f'"{STRING_CHAR}*"'
    value = "|".join([string, NUMBER, "true", "false", "null"])
    for _ in range(depth):
        inner = f"({value})"
        obj = rf"\{{({string}:{inner}(,{string}:{inner})*)?\}}"
        arr = rf"\[({inner}(,{inner})*)?\]"
        value = f"{value}|{obj}|{arr}"
    return rf"\{{({string}:({value})(,{string}:({value}))*)?\}}"
    # END SOLUTION
# ANCHOR_END: json_object_regex
