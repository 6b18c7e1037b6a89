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

from miniyaie.structured.json_containers import (NUMBER, SCALARS, STRING_CHAR, array_regex, json_object_regex,  # noqa: F401
                                                 object_regex)
from miniyaie.structured.limits import Limits, PatternError, over
from miniyaie.structured.regex_check import json_string_regex
from miniyaie.structured.schema_values import check_value, satisfies, short, value_text
from miniyaie.structured.trie_regex import alternation

MAX_DEPTH = 5
IGNORED = {"title", "description", "$schema", "$id", "examples", "default", "$comment"}
KNOWN = {"type", "properties", "required", "enum", "const", "anyOf", "minLength", "maxLength", "pattern", "items",
         "minItems", "maxItems", "additionalProperties"} | IGNORED
TYPES = {"object", "array", "string", "integer", "number", "boolean", "null"}
ANY_ITEM = {"type": ["string", "number", "boolean", "null"]}  # an array's items when the schema names none


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
    check_structure(schema, limits)
    _check_judged(schema, depth, limits)
    regex = schema_regex(schema, depth, limits)
    if len(regex) > limits.max_regex_length:
        raise over("json_schema: the regex's length", len(regex), limits.max_regex_length, "max_regex_length")
    return regex


# ANCHOR: check_structure
def check_structure(schema: dict, limits: Limits) -> None:
    """Refuse, before any regex is built, a schema the conversion cannot honour; return None otherwise.

    A refusal is a PatternError whose message names the keyword (or the limit's setting, as `over`
    writes it). Called after _check_keywords: every keyword's value is of the right kind, but enum's
    and anyOf's, which must be lists (checked here). The schemas refused:
    - those no value can satisfy: an empty anyOf; an object schema (type "object", alone or in a
      list, or no type but properties) requiring a property it does not list (named); bounds that
      contradict each other for a type the schema allows, alone or in a list (maxItems below
      minItems, maxLength below minLength; a missing lower bound is 0);
    - those holding a value JSON or UTF-8 cannot write: in an enum or a const (as check_value
      refuses it, naming the keyword), or as an object schema's property name;
    - more enum entries or anyOf branches than limits.max_enum, as `over` writes it ("enum: entries
      1001 is over the limit of 1000 (structured limit max_enum)"; "anyOf: entries ...");
    - an anyOf with any keyword beside it but annotations (IGNORED), named: it belongs in each branch.
    An enum or a const is its schema's whole language: the keywords beside it only filter its
    values (schema_regex), so they are not checked here.
    Examples: {"enum": 5}, {"anyOf": []}, {"anyOf": [...], "type": "x"}, {"properties": {},
    "required": ["b"]}, {"type": ["array", "null"], "minItems": 3, "maxItems": 2} are refused;
    {"anyOf": [{"type": "null"}], "title": "t"}, {"type": "array", "maxItems": 0}, {"type": "string",
    "properties": {}, "required": ["b"]} and 1,000 enum entries pass.
    """
    # Nudge: which keywords does each kind of schema read, and what would make each unsatisfiable or unwritable?
    # Hint 1: A schema nothing can satisfy, or whose values JSON cannot write, is refused
    #   by name before any regex is built (a clear 400 beats an output that cannot
    #   validate). Look at the schema the way schema_regex will: const/enum first, else
    #   anyOf, else its type(s); check only what that branch reads.
    # Hint 2: const/enum: the values (a list for enum), their count against max_enum, and
    #   value_text on each (it runs check_value and json.dumps). anyOf: a non-empty list
    #   within max_enum, and no keyword beside it outside IGNORED. Otherwise, with kinds =
    #   the type as a list: if "object" is one of them (or there is no type but there are
    #   properties), check_value each property name and compare required with the
    #   properties; for "array" and "string", compare the upper bound with the lower one.
    # Hint 3:
    #   if "const" in schema or "enum" in schema:
    #       values = [schema["const"]] or _list(schema, "enum", "a list of values"); count vs max_enum (over(...))
    #       for v in values: value_text(v, keyword)
    #   elif "anyOf" in schema:
    #       branches = _list(schema, "anyOf", ...); empty -> PatternError; count vs max_enum
    #       others = sorted(set(schema) - IGNORED - {"anyOf"}); if others: PatternError naming others[0]
    #   else:
    #       kinds = type if a list else [type]
    #       if "object" in kinds or (no type and "properties" in schema): check names, missing required
    #       for (low, high, kind) in (minItems, maxItems, array), (minLength, maxLength, string):
    #           if kind in kinds and schema.get(high) is not None and schema[high] < schema.get(low, 0): PatternError
    # BEGIN SOLUTION 8.5: From a schema to its regex
    if "const" in schema or "enum" in schema:
        if "enum" in schema and len(_list(schema, "enum", "a list of values")) > limits.max_enum:
            raise over("enum: entries", len(schema["enum"]), limits.max_enum, "max_enum")
        for keyword in sorted({"const", "enum"} & set(schema)):
            for value in [schema["const"]] if keyword == "const" else schema["enum"]:
                value_text(value, keyword)
    elif "anyOf" in schema:
        branches = _list(schema, "anyOf", "a list of schemas")
        if not branches:
            raise PatternError("anyOf is empty: no value can match it")
        if len(branches) > limits.max_enum:
            raise over("anyOf: entries", len(branches), limits.max_enum, "max_enum")
        others = sorted(set(schema) - IGNORED - {"anyOf"})
        if others:
            raise PatternError(f"anyOf with other keywords ({others[0]!r}) is not supported: put them inside each "
                               "anyOf branch")
    else:
        kind = schema.get("type")
        kinds = kind if isinstance(kind, list) else [kind]
        if "object" in kinds or (kind is None and "properties" in schema):
            for name in schema.get("properties", {}):
                check_value(name, "properties")
            missing = sorted(set(schema.get("required", [])) - set(schema.get("properties", {})))
            if missing:
                raise PatternError(f"required property {missing[0]!r} is not in properties")
        for low, high, what in (("minItems", "maxItems", "array"), ("minLength", "maxLength", "string")):
            if what in kinds and schema.get(high) is not None and schema[high] < schema.get(low, 0):
                raise PatternError(f"{high} {schema[high]} is below {low} {schema.get(low, 0)}: no {what} can match")
    # END SOLUTION
# ANCHOR_END: check_structure


# ANCHOR: schema_regex
def schema_regex(schema: dict, depth: int, limits: Limits) -> str:
    r"""The regex of the compact JSON texts valid under `schema`, a schema that schema_to_regex has checked.

    Compact: as json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    writes it. The regex matches the compact text of every value valid
    under the schema (an object's members in the schema's order), and only
    texts that are JSON valid under it. Checked already: every keyword
    known and of the right kind, sizes within `limits`, enum/const values
    that JSON can write, required names among the properties, anyOf alone.
    - const, enum: exactly those values, less the ones the schema
      refuses as JSON Schema reads it (satisfies, schema_values.py; a
      const beside an enum must be in it): {"type": "string", "enum": [1,
      "a"]} allows only "a"; {"enum": ["a", 1], "minLength": 3} only 1
      (minLength applies to strings only); {"type": "object", "enum":
      [{"a": 1}]} the object; {"const": 1, "enum": [true]} nothing. A
      PatternError naming const or enum if none is left.
    - anyOf: a value valid under any branch. type, a list: any of the types.
    - integer, number, boolean, null: SCALARS; string: _string(schema, limits).
    - array: `items` (default ANY_ITEM), minItems (default 0) to maxItems
      (default: no bound) of them.
    - object, or no type but `properties`: the listed properties, the
      required ones always written, no others.
    - otherwise (no type, no properties): a PatternError naming the type.
    A subschema (a branch, items, a property's schema) one level deeper
    becomes schema_to_regex(sub, depth + 1, limits, its keyword): the
    limits and the depth cap hold all the way down.
    """
    # Nudge: an enum value is kept when the client's validator would accept it; who, in this package, judges as it does?
    # Hint 1: Dispatch on what the schema says, most specific first: const/enum, then
    #   anyOf, then a list of types, then one type. The enum is the subtle one: its values
    #   must also satisfy whatever else the schema says (a type, a maxLength, a const), as
    #   JSON Schema reads it. Your regex is no judge for that: it is narrower than JSON
    #   Schema (an object with no properties is only {}, a pattern is matched whole).
    #   Every alternation you build goes inside a group, so it can sit inside a member or an
    #   item. Property names are texts like enum values: literal(name).
    # Hint 2: const/enum: the compact JSON texts of the values that satisfies(value, schema)
    #   keeps; none left: PatternError; else alternation(texts). anyOf: "(" + "|".join(branch
    #   regexes) + ")". A list of types: the same over schema_regex({**schema, "type": k})
    #   for each k. Scalars and strings: the helpers. array: array_regex(item regex,
    #   minItems or 0, maxItems or None). object: object_regex([(literal(name) + ":" + regex
    #   of its schema, name in required) for each property in order]).
    # Hint 3:
    #   if "const" in schema or "enum" in schema:
    #       values = [schema["const"]] if "const" in schema else schema["enum"]
    #       texts = [compact JSON of v for v in values if satisfies(v, schema)]
    #       if not texts: raise PatternError("enum: no value is allowed ...")
    #       return alternation(texts)
    #   if "anyOf" in schema: return "(" + "|".join(schema_to_regex(s, depth + 1, limits, "anyOf") for s in schema["anyOf"]) + ")"
    #   kind = schema.get("type")
    #   if kind is a list: return "(" + "|".join(schema_regex({**schema, "type": k}, depth, limits) for k in kind) + ")"
    #   if kind in SCALARS: return SCALARS[kind]; if kind == "string": return _string(schema, limits)
    #   if kind == "array": return array_regex(schema_to_regex(items or ANY_ITEM, depth + 1, limits, "items"), low, high)
    #   if kind == "object" or "properties" in schema: return object_regex([...members in order...])
    #   raise PatternError(f"unsupported or missing JSON schema type {kind!r}")
    # BEGIN SOLUTION 8.5: From a schema to its regex
    if "const" in schema or "enum" in schema:
        keyword = "const" if "const" in schema else "enum"
        texts = [json.dumps(value, separators=(",", ":"), ensure_ascii=False)
                 for value in ([schema["const"]] if keyword == "const" else schema["enum"]) if satisfies(value, schema)]
        if not texts:
            raise PatternError(f"{keyword}: no value is allowed (empty, or none satisfies the schema's other "
                               "keywords): nothing could be written")
        return alternation(texts)
    if "anyOf" in schema:
        return "(" + "|".join(schema_to_regex(s, depth + 1, limits, "anyOf") for s in schema["anyOf"]) + ")"
    kind = schema.get("type")
    if isinstance(kind, list):
        return "(" + "|".join(schema_regex({**schema, "type": k}, depth, limits) for k in kind) + ")"
    if kind in SCALARS:
        return SCALARS[kind]
    if kind == "string":
        return _string(schema, limits)
    if kind == "array":
        item = schema_to_regex(schema.get("items", ANY_ITEM), depth + 1, limits, "items")
        return array_regex(item, schema.get("minItems", 0), schema.get("maxItems"))
    if kind == "object" or "properties" in schema:
        required = schema.get("required", [])
        return object_regex([(literal(name) + ":" + schema_to_regex(sub, depth + 1, limits, "properties"),
                              name in required) for name, sub in schema.get("properties", {}).items()])
    raise PatternError(f"unsupported or missing JSON schema type {kind!r}")
    # END SOLUTION
# ANCHOR_END: schema_regex


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


def _check_judged(schema: dict, depth: int, limits: Limits) -> None:
    """Beside an enum or const, the keywords that judge its values hold only what a schema may: checked as usual."""
    judged = "const" in schema or "enum" in schema
    for keyword, subs in (("anyOf", schema.get("anyOf", [])), ("items", [schema.get("items", {})]),
                          ("properties", schema.get("properties", {}).values())):
        for sub in subs if keyword in schema and judged else ():
            schema_to_regex(sub, depth + 1, limits, keyword)
    if "pattern" in schema and judged:
        json_string_regex(schema["pattern"], limits, "pattern")


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


def _string(schema: dict, limits: Limits) -> str:
    if "pattern" in schema:
        if schema.get("minLength") is not None or schema.get("maxLength") is not None:
            raise PatternError("a string schema with 'pattern' cannot also have 'minLength' or 'maxLength'")
        return '"(' + json_string_regex(schema["pattern"], limits, "pattern") + ')"'
    low, high = schema.get("minLength", 0), schema.get("maxLength")
    return f'"{STRING_CHAR}{{{low},{"" if high is None else high}}}"'
