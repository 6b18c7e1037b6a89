"""A JSON schema as a regex, for the part of JSON Schema that structured output needs.

Whitespace policy: none. The output is compact JSON, as
`json.dumps(value, separators=(",", ":"))` writes it: no spaces or newlines
between tokens. That keeps the automaton small and lets jump-forward
(guide.py) write every key and separator without the model.

Supported: `type` (object, array, string, integer, number, boolean, null,
or a list of them), `properties` (in the schema's order) with `required`,
`enum`, `const`, `anyOf`; strings with `minLength`, `maxLength`, `pattern`
(a regex over the unescaped text, without quotes or backslashes); arrays
with `items`, `minItems`, `maxItems`; objects nested up to MAX_DEPTH. An
object allows only its listed properties. Anything else is refused with a
PatternError naming the keyword: better a clear 400 than an output that
does not validate.
"""

from __future__ import annotations

import json
import re

from miniyaie.structured.fsm import PatternError

MAX_DEPTH = 5
MAX_OPTIONAL = 8  # optional properties per object (the regex doubles with each)
IGNORED = {"title", "description", "$schema", "$id", "examples", "default", "$comment"}
KNOWN = {"type", "properties", "required", "enum", "const", "anyOf", "minLength", "maxLength", "pattern", "items",
         "minItems", "maxItems", "additionalProperties"} | IGNORED

INTEGER = r"-?(0|[1-9][0-9]*)"
NUMBER = INTEGER + r"(\.[0-9]+)?([eE][+-]?[0-9]+)?"
STRING_CHAR = r'([^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})'
SCALARS = {"integer": INTEGER, "number": NUMBER, "boolean": "(true|false)", "null": "null"}


def literal(value) -> str:
    """The regex that matches exactly the compact JSON of `value`."""
    return re.escape(json.dumps(value, separators=(",", ":"), ensure_ascii=False))


def schema_to_regex(schema: dict | str, depth: int = 0) -> str:
    """The regex of the compact JSON texts valid under `schema` (a dict, or its JSON text)."""
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as exc:
            raise PatternError(f"json_schema is not valid JSON: {exc}") from None
    if not isinstance(schema, dict):
        raise PatternError(f"a JSON schema must be an object, got {type(schema).__name__}")
    if depth > MAX_DEPTH:
        raise PatternError(f"the schema nests deeper than {MAX_DEPTH} levels")
    unknown = sorted(set(schema) - KNOWN)
    if unknown:
        raise PatternError(f"unsupported JSON schema keyword {unknown[0]!r}")
    if "const" in schema:
        return literal(schema["const"])
    if "enum" in schema:
        return "(" + "|".join(literal(v) for v in schema["enum"]) + ")"
    if "anyOf" in schema:
        return "(" + "|".join(schema_to_regex(s, depth + 1) for s in schema["anyOf"]) + ")"
    kind = schema.get("type")
    if isinstance(kind, list):
        return "(" + "|".join(schema_to_regex({**schema, "type": k}, depth) for k in kind) + ")"
    if kind in SCALARS:
        return SCALARS[kind]
    if kind == "string":
        return _string(schema)
    if kind == "array":
        return _array(schema, depth)
    if kind == "object" or "properties" in schema:
        if schema.get("additionalProperties", False) not in (False,):
            raise PatternError("unsupported JSON schema keyword 'additionalProperties' (only false: listed properties only)")
        properties = schema.get("properties", {})
        required = set(schema.get("required", []))
        missing = sorted(required - set(properties))
        if missing:
            raise PatternError(f"required property {missing[0]!r} is not in properties")
        if sum(name not in required for name in properties) > MAX_OPTIONAL:
            raise PatternError(f"at most {MAX_OPTIONAL} optional properties per object")
        members = [(literal(name) + ":" + schema_to_regex(sub, depth + 1), name in required) for name, sub in properties.items()]
        return object_regex(members)
    raise PatternError(f"unsupported or missing JSON schema type {kind!r}")


# ANCHOR: object_regex
def object_regex(members: list[tuple[str, bool]]) -> str:
    r"""The regex of a JSON object whose members come in this order, each present or, if optional, absent.

    members: (regex of one `"key":value` member, required?) in the schema's
    order. Members are separated by exactly one comma: no leading, trailing
    or doubled comma whichever optional members are left out. Examples, with
    members A (required) and B, C (optional): {A}, {A,B}, {A,C}, {A,B,C}.
    """
    # Idea: whether a comma comes before a member depends only on whether any member came before it.
    # Stuck? `miniyaie hint 8.3` prints hints, one level at a time.
    # TODO(Task 8.3): Objects with optional members. Replace this line with your code.
    raise NotImplementedError('Chapter 8, Task 3: Objects with optional members — see book/src/ch08_structured_output.md')
# ANCHOR_END: object_regex


def _string(schema: dict) -> str:
    if "pattern" in schema:
        if schema.get("minLength") is not None or schema.get("maxLength") is not None:
            raise PatternError("a string schema with 'pattern' cannot also have 'minLength' or 'maxLength'")
        return '"(' + schema["pattern"].removeprefix("^").removesuffix("$") + ')"'
    low, high = schema.get("minLength", 0), schema.get("maxLength")
    if not isinstance(low, int) or (high is not None and (not isinstance(high, int) or high < low)):
        raise PatternError(f"bad minLength/maxLength: {low!r}, {high!r}")
    return f'"{STRING_CHAR}{{{low},{"" if high is None else high}}}"'


def _array(schema: dict, depth: int) -> str:
    item = schema_to_regex(schema.get("items", {"type": ["string", "number", "boolean", "null"]}), depth + 1)
    low, high = schema.get("minItems", 0), schema.get("maxItems")
    if not isinstance(low, int) or low < 0 or (high is not None and (not isinstance(high, int) or high < low)):
        raise PatternError(f"bad minItems/maxItems: {low!r}, {high!r}")
    if high == 0:
        return r"\[\]"
    more = f"(,{item}){{{max(low - 1, 0)},{'' if high is None else high - 1}}}"
    body = item + more
    return r"\[" + (body if low > 0 else f"({body})?") + r"\]"


def json_object_regex(depth: int = 2) -> str:
    """Any JSON object nested at most `depth` levels (OpenAI's "json_object" response format)."""
    string = f'"{STRING_CHAR}*"'
    value = "|".join([string, NUMBER, "true", "false", "null"])
    for _ in range(depth):
        inner = f"({value})"
        obj = rf"\{{({string}:{inner}(,{string}:{inner})*)?\}}"
        arr = rf"\[({inner}(,{inner})*)?\]"
        value = f"{value}|{obj}|{arr}"
    return rf"\{{({string}:({value})(,{string}:({value}))*)?\}}"
