"""A JSON schema as a regex, for the part of JSON Schema that structured output needs.

Whitespace policy: none. The output is compact JSON, as
`json.dumps(value, separators=(",", ":"))` writes it: no spaces or newlines
between tokens. That keeps the automaton small and lets jump-forward
(guide.py) write every key and separator without the model.

Supported: `type` (object, array, string, integer, number, boolean, null,
or a list of them), `properties` (in the schema's order) with `required`,
`enum`, `const`, `anyOf`; strings with `minLength`, `maxLength`, `pattern`
(a complete regex on its own, over the string's text, which must need no
escaping: regex_check.py); arrays with `items`, `minItems`, `maxItems`;
objects nested up to MAX_DEPTH. An object allows only its listed
properties; `enum` and `const` values that the schema's other keywords
refuse are left out. Anything else, any value of the wrong type, any size
over the limits (limits.py) and any schema no value can satisfy is refused
with a PatternError naming the keyword: better a clear 400 than an output
that does not validate.
"""

from __future__ import annotations

import json
import re

from miniyaie.structured.json_containers import array_regex, object_regex
from miniyaie.structured.limits import Limits, PatternError, over
from miniyaie.structured.regex_check import json_string_regex
from miniyaie.structured.schema_values import check_value, short, value_text
from miniyaie.structured.trie_regex import alternation

MAX_DEPTH = 5
IGNORED = {"title", "description", "$schema", "$id", "examples", "default", "$comment"}
KNOWN = {"type", "properties", "required", "enum", "const", "anyOf", "minLength", "maxLength", "pattern", "items",
         "minItems", "maxItems", "additionalProperties"} | IGNORED
TYPES = {"object", "array", "string", "integer", "number", "boolean", "null"}

INTEGER = r"-?(0|[1-9][0-9]*)"
NUMBER = INTEGER + r"(\.[0-9]+)?([eE][+-]?[0-9]+)?"
# A character of a JSON string: not a quote, backslash or control character; or an escape (never a
# \u escape of a lone surrogate half, which would make one character count as two).
STRING_CHAR = r'([^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u([0-9a-cA-CefEF][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2}))'
SCALARS = {"integer": INTEGER, "number": NUMBER, "boolean": "(true|false)", "null": "null"}


def literal(value) -> str:
    """The regex that matches exactly the compact JSON of `value`."""
    return re.escape(json.dumps(value, separators=(",", ":"), ensure_ascii=False))


def schema_to_regex(schema: dict | str, depth: int = 0, limits: Limits | None = None, where: str = "json_schema") -> str:
    """The regex of the compact JSON texts valid under `schema` (a dict, or its JSON text).

    `where`: the keyword this (sub)schema sits under, named by the refusals that concern it as a whole."""
    limits = limits or Limits()
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except (json.JSONDecodeError, RecursionError, ValueError) as exc:
            raise PatternError(f"json_schema is not valid JSON: {exc}") from None
    if not isinstance(schema, dict):
        raise PatternError(f"{where}: a JSON schema must be an object, got {type(schema).__name__}")
    if depth > MAX_DEPTH:
        raise PatternError(f"{where}: the schema nests deeper than {MAX_DEPTH} levels")
    unknown = sorted(set(schema) - KNOWN, key=str)
    if unknown:
        raise PatternError(f"unsupported JSON schema keyword {unknown[0]!r}")
    _check_keywords(schema, depth, limits)
    regex = _regex(schema, depth, limits)
    if len(regex) > limits.max_regex_length:
        raise over("json_schema: the regex's length", len(regex), limits.max_regex_length, "max_regex_length")
    return regex


def _regex(schema: dict, depth: int, limits: Limits) -> str:
    rest = {k: v for k, v in schema.items() if k not in IGNORED | {"enum", "const"}}
    if "const" in schema or "enum" in schema:
        values = [schema["const"]] if "const" in schema else _list(schema, "enum", "a list of values")
        if len(values) > limits.max_enum:
            raise over("enum: entries", len(values), limits.max_enum, "max_enum")
        texts = [value_text(v, "const" if "const" in schema else "enum") for v in values]
        if rest:  # keep the values the schema's other keywords allow (by their own regex)
            allowed = re.compile(schema_to_regex(rest, depth, limits))
            texts = [t for t in texts if allowed.fullmatch(t)]
        if not texts:
            raise PatternError(f"{'const' if 'const' in schema else 'enum'}: no value is allowed (empty, or none "
                               "satisfies the schema's other keywords): nothing could be written")
        return alternation(texts)
    if "anyOf" in schema:
        branches = _list(schema, "anyOf", "a list of schemas")
        if not branches:
            raise PatternError("anyOf is empty: no value can match it")
        if len(branches) > limits.max_enum:
            raise over("anyOf: entries", len(branches), limits.max_enum, "max_enum")
        if set(rest) - {"anyOf"}:
            raise PatternError(f"anyOf with other keywords ({sorted(set(rest) - {'anyOf'})[0]!r}) is not supported: "
                               "put them inside each anyOf branch")
        return "(" + "|".join(schema_to_regex(s, depth + 1, limits, "anyOf") for s in branches) + ")"
    kind = schema.get("type")
    if isinstance(kind, list):
        if not kind:
            raise PatternError("type is an empty list: no value can match it")
        for k in kind:
            if not isinstance(k, str) or k not in TYPES:
                raise PatternError(f"type: each entry must be one of {', '.join(sorted(TYPES))}, got {short(k)}")
        return "(" + "|".join(_regex({**schema, "type": k}, depth, limits) for k in dict.fromkeys(kind)) + ")"
    if kind is not None and (not isinstance(kind, str) or kind not in TYPES):
        raise PatternError(f"type must be one of {', '.join(sorted(TYPES))} or a list of them, got {short(kind)}")
    if kind in SCALARS:
        return SCALARS[kind]
    if kind == "string":
        return _string(schema, limits)
    if kind == "array":
        return _array(schema, depth, limits)
    if kind == "object" or "properties" in schema:
        return _object(schema, depth, limits)
    raise PatternError(f"unsupported or missing JSON schema type {kind!r}")


def _check_keywords(schema: dict, depth: int, limits: Limits) -> None:
    """Every keyword's value of the right kind, used by this schema's type or not (a mistake is a mistake)."""
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if "type" in schema and (not kinds or any(not isinstance(k, str) or k not in TYPES for k in kinds)
                             or len(set(kinds)) < len(kinds)):
        raise PatternError(f"type must be one of {', '.join(sorted(TYPES))} or a non-empty list of them without "
                           f"repeats, got {short(kind)}")
    for keyword, cap, name in (("minLength", limits.max_string_length, "max_string_length"),
                               ("maxLength", limits.max_string_length, "max_string_length"),
                               ("minItems", limits.max_items, "max_items"), ("maxItems", limits.max_items, "max_items")):
        _count(schema, keyword, None, cap, name)
    if "pattern" in schema and not isinstance(schema["pattern"], str):
        raise PatternError(f"pattern must be a string (a regex), got {type(schema['pattern']).__name__}")
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(n, str) for n in required) or len(set(required)) < len(required):
        raise PatternError(f"required must be a list of property names (strings, no repeats), got {short(required)}")
    if not isinstance(schema.get("properties", {}), dict):
        raise PatternError(f"properties must be an object of schemas, got {type(schema['properties']).__name__}")
    if schema.get("additionalProperties", False) is not False:
        raise PatternError("unsupported JSON schema keyword 'additionalProperties' (only false: listed properties only)")
    if not isinstance(schema.get("items", {}), dict):
        raise PatternError(f"items must be a schema (an object), got {type(schema['items']).__name__}")
    if "object" not in kinds and "properties" in schema and kind is not None:  # not used here: checked all the same
        for sub in schema["properties"].values():
            schema_to_regex(sub, depth + 1, limits, "properties")
    if "array" not in kinds and "items" in schema:
        schema_to_regex(schema["items"], depth + 1, limits, "items")


def _list(schema: dict, keyword: str, what: str) -> list:
    if not isinstance(schema[keyword], list):
        raise PatternError(f"{keyword} must be {what}, got {type(schema[keyword]).__name__}")
    return schema[keyword]


def _count(schema: dict, keyword: str, default, cap: int, name: str):
    """A whole-number size keyword: its value, checked (type, sign, the operator's cap)."""
    if keyword not in schema:
        return default
    value = schema[keyword]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise PatternError(f"{keyword} must be a whole number >= 0, got {short(value)}")
    if value > cap:
        raise over(keyword, value, cap, name)
    return value


def _object(schema: dict, depth: int, limits: Limits) -> str:
    properties = schema.get("properties", {})
    if not isinstance(properties, dict):
        raise PatternError(f"properties must be an object of schemas, got {type(properties).__name__}")
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(name, str) for name in required):
        raise PatternError(f"required must be a list of property names (strings), got {short(required)}")
    for name in properties:
        check_value(name, "properties", 0)
    missing = sorted(set(required) - set(properties))
    if missing:
        raise PatternError(f"required property {missing[0]!r} is not in properties")
    members = [(literal(name) + ":" + schema_to_regex(sub, depth + 1, limits, "properties"), name in required)
               for name, sub in properties.items()]
    return object_regex(members)


def _string(schema: dict, limits: Limits) -> str:
    if "pattern" in schema:
        if schema.get("minLength") is not None or schema.get("maxLength") is not None:
            raise PatternError("a string schema with 'pattern' cannot also have 'minLength' or 'maxLength'")
        return '"(' + json_string_regex(schema["pattern"], limits, "pattern") + ')"'
    low = _count(schema, "minLength", 0, limits.max_string_length, "max_string_length")
    high = _count(schema, "maxLength", None, limits.max_string_length, "max_string_length")
    if high is not None and high < low:
        raise PatternError(f"maxLength {high} is below minLength {low}: no string can match")
    return f'"{STRING_CHAR}{{{low},{"" if high is None else high}}}"'


def _array(schema: dict, depth: int, limits: Limits) -> str:
    low = _count(schema, "minItems", 0, limits.max_items, "max_items")
    high = _count(schema, "maxItems", None, limits.max_items, "max_items")
    if high is not None and high < low:
        raise PatternError(f"maxItems {high} is below minItems {low}: no array can match")
    items = schema.get("items", {"type": ["string", "number", "boolean", "null"]})
    if not isinstance(items, dict):
        raise PatternError(f"items must be a schema (an object), got {type(items).__name__}")
    return array_regex(schema_to_regex(items, depth + 1, limits, "items"), low, high)


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
