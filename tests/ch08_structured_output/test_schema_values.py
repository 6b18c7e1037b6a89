"""Tasks 8.4 and 8.5: the values a schema carries, judged as JSON Schema judges them and refused in words a reply can carry.

An enum beside keywords but no type: each keyword judges only the values of
the types it applies to (`jsonschema` is the referee). A lone surrogate in
a value, a key or a property name: refused naming the problem, in a message
that UTF-8 can write (a 400's body is UTF-8: a message that quotes the
surrogate raw turns the 400 into a 500).
"""

import json
import re

import jsonschema
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from miniyaie.structured import PatternError, schema_to_regex
from miniyaie.structured.schema_values import check_value, satisfies


def compact(value) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


# ---------------------------------------------------------------- an enum beside keywords of other types
scalars = st.none() | st.booleans() | st.integers(-5, 5) | st.text("ab", max_size=4)
enum_values = st.lists(scalars | st.lists(scalars, max_size=3) | st.dictionaries(st.sampled_from(["k", "é"]), scalars,
                                                                                  max_size=2), min_size=1, max_size=5)
other_keywords = st.dictionaries(st.sampled_from(["minLength", "maxLength", "minItems", "maxItems"]), st.integers(0, 3),
                                 min_size=1)


@pytest.mark.task("8.5")
@given(enum_values, other_keywords)
@example(["a", 1], {"minLength": 3}).via("minLength says nothing about 1: only 1 is allowed")
@example(["abc", [1]], {"minItems": 2}).via("minItems says nothing about a string")
@example([{"a": 1}, "xy"], {"maxLength": 1}).via("nor maxLength about an object")
@example([[1, 2], "a", None, "", []], {"maxItems": 1, "minLength": 1}).via("each keyword for its own type")
@example(["a", "ab"], {"minLength": 3}).via("no string is long enough: none is left")
@example(["a", 1], {"minLength": 3, "maxLength": 2}).via("bounds no string meets, beside a string: refused, or 1")
def test_without_a_type_each_keyword_judges_only_the_enum_values_of_its_type(values, keywords):
    schema = {"enum": values, **keywords}
    judge = jsonschema.Draft202012Validator(keywords)
    valid = [v for v in values if judge.is_valid(v)]
    rule = "with no type, a keyword judges only the values of its own type (minLength strings, minItems arrays)"
    clash = [high for low, high, kind in (("minLength", "maxLength", str), ("minItems", "maxItems", list))
             if keywords.get(high, 99) < keywords.get(low, 0) and any(isinstance(v, kind) for v in values)]
    try:
        regex = schema_to_regex(schema)
    except PatternError as refused:
        if clash and clash[0] in str(refused):
            return  # bounds that contradict each other, for a type the enum holds: refused by name, as with a type
        assert not valid, (f"Task 8.5: the schema was refused ({refused}), but {compact(valid[0])} is valid under it: "
                           f"{rule}. The schema: {schema}")
        assert "enum" in str(refused), f"Task 8.5: no value is left: the refusal must name enum: {refused}. The schema: {schema}"
        return
    assert valid, (f"Task 8.5: no value of the enum is valid under {keywords}: the schema must be refused naming enum, "
                   f"got the regex {regex}. The schema: {schema}")
    for value in values:
        allowed, ok = bool(re.fullmatch(regex, compact(value))), judge.is_valid(value)
        assert allowed == ok, (
            f"Task 8.5: the regex {'refuses' if ok else 'allows'} {compact(value)}, which is {'' if ok else 'not '}"
            f"valid under {keywords}: {rule}. The schema: {schema}")


# ---------------------------------------------------------------- satisfies, judged against jsonschema
KEYS = st.sampled_from(["a", "b", "é"])
leaves = (st.none() | st.booleans() | st.sampled_from([0, 1, -1, 2, 1.0, 2.0, 0.0, 2.5, -0.5])
          | st.text("aé😀", max_size=3))
json_values = st.recursive(leaves, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
                           max_leaves=6)
TYPES = ["integer", "number", "string", "object", "array", "boolean", "null"]
PATTERNS = ["a", "^é", "😀$", "[ab]"]


@st.composite
def judged_schemas(draw, depth: int = 0):
    """A schema within schema_to_regex's rules: an anyOf alone, or a type and/or an enum or const with the keywords
    of its types (nested properties, items and anyOf branches drawn the same way, up to 2 levels)."""
    if depth < 2 and draw(st.integers(0, 4)) == 4:
        return {"anyOf": draw(st.lists(judged_schemas(depth + 1), min_size=1, max_size=3))}
    schema, judged = {}, draw(st.sampled_from(["", "enum", "", "const", "enum", "both"]))
    types = [draw(st.sampled_from(TYPES))] + draw(st.lists(st.sampled_from(TYPES), max_size=1, unique=True))
    types = [] if judged and draw(st.integers(0, 3)) == 3 else sorted(set(types), key=types.index)
    if types:
        schema["type"] = types[0] if len(types) == 1 and draw(st.booleans()) else types
    kinds = set(types) if types else set(TYPES)
    for kind, low, high in (("string", "minLength", "maxLength"), ("array", "minItems", "maxItems")):
        if kind in kinds and draw(st.booleans()):
            bounds = sorted(draw(st.lists(st.integers(0, 3), min_size=2, max_size=2)))
            schema.update({k: b for k, b, keep in zip((low, high), bounds, draw(st.tuples(st.booleans(), st.booleans())))
                           if keep})
    if "string" in kinds and draw(st.integers(0, 3)) == 3:
        schema["pattern"] = draw(st.sampled_from(PATTERNS))
    if "array" in kinds and depth < 2 and draw(st.booleans()):
        schema["items"] = draw(judged_schemas(depth + 1))
    if "object" in kinds and draw(st.booleans()):
        names = draw(st.lists(KEYS, unique=True, max_size=2))
        schema["properties"] = {name: draw(judged_schemas(depth + 1)) for name in names} if depth < 2 else {}
        required = draw(st.lists(KEYS if judged else st.sampled_from(names or ["a"]), unique=True, max_size=2))
        if required and (judged or names):
            schema["required"] = required
        if draw(st.booleans()):
            schema["additionalProperties"] = False
    if judged in ("enum", "both"):  # values near the other keywords' edges, so that they decide
        schema["enum"] = draw(st.lists(near(schema), min_size=1, max_size=4))
    if judged in ("const", "both"):
        schema["const"] = draw(st.sampled_from(schema["enum"]) | near(schema) if judged == "both" else near(schema))
    return schema


def twin(value):
    """The value with true and 1, false and 0 swapped all the way down (equal under ==, not under JSON Schema)."""
    if isinstance(value, list):
        return [twin(v) for v in value]
    if isinstance(value, dict):
        return {k: twin(v) for k, v in value.items()}
    return {True: 1, False: 0}[value] if isinstance(value, bool) else bool(value) if value in (0, 1) else value


def near(schema: dict):
    """Values close to the schema's edges: its enum's and const's (and their twins), of its types and the ones mistaken for them
    (1 and 1.0 and true, "é" and "😀" beside a length), with its properties and one more, any value at all."""
    own = schema.get("enum", []) + [schema[k] for k in ("const",) if k in schema]
    options = [st.sampled_from(own), st.sampled_from(own).map(twin)] if own else []
    options += [near(branch) for branch in schema.get("anyOf", [])]
    kinds = schema.get("type", TYPES)
    for kind in kinds if isinstance(kinds, list) else [kinds]:
        if kind in ("integer", "number", "boolean"):
            options.append(st.sampled_from([0, 1, 2, 1.0, 2.5, True, False]))
        elif kind == "string":  # around the length bounds, in characters of 1, 2 and 4 UTF-8 bytes
            high = schema.get("maxLength", schema.get("minLength", 2))
            options.append(st.text("é😀a", min_size=max(high - 1, 0), max_size=high + 1))
        elif kind == "array":
            options.append(st.lists(near(schema["items"]) if "items" in schema else json_values, max_size=3))
        elif kind == "object":
            listed = st.fixed_dictionaries({}, optional={k: near(sub) for k, sub in schema.get("properties", {}).items()})
            more = st.dictionaries(KEYS, json_values, max_size=1)
            options.append(st.tuples(listed, more).map(lambda both: {**both[1], **both[0]}))
    return st.one_of(options + [json_values])


def judged_values(schema: dict):
    return st.tuples(near(schema), st.just(schema))


def jsonschema_verdict(value, schema: dict) -> str:
    errors = [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(value)]
    return f"invalid ({errors[0]})" if errors else "valid"


@pytest.mark.task("8.5")
@settings(max_examples=300)  # each slip of the judge shows on a few drawn pairs in a hundred: the examples pin them
@given(judged_schemas().flatmap(judged_values))
@example((1, {"type": "number", "enum": [1, 2.5]})).via("a number includes the integers")
@example(({"a": 1}, {"type": "object", "properties": {"a": {"type": "number"}}, "enum": [{"a": 1}]})).via(
    "an integer under a nested number")
@example((True, {"type": "integer", "enum": [True, 3]})).via("true is no integer")
@example((False, {"type": ["number", "null"], "enum": [False, None]})).via("false is no number")
@example(({"a": 1, "b": 2}, {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False,
                              "enum": [{"a": 1, "b": 2}, {"a": 1}]})).via("an unlisted property, additionalProperties false")
@example(({"a": "x"}, {"type": "object", "properties": {"a": {"anyOf": [{"type": "integer"}, {"type": "null"}]}},
                       "enum": [{"a": "x"}, {"a": 1}]})).via("a property's anyOf, under an enum")
@example(([True], {"items": {"enum": [1]}, "enum": [[True]]})).via("true is not 1, one level down")
@example(([1, [True]], {"type": "array", "enum": [[1, [1]], [1, [True]]], "const": [1, [1]]})).via(
    "true is not 1, in a list in a list")
@example(("é", {"type": "string", "maxLength": 1, "enum": ["é", "ab"]})).via("lengths count characters, not bytes")
@example(("😀", {"type": "string", "minLength": 2, "enum": ["😀", "ab"]})).via("one character, four UTF-8 bytes")
def test_satisfies_judges_as_jsonschema_does(case):
    value, schema = case
    verdict = jsonschema_verdict(value, schema)
    said = satisfies(value, schema)
    assert said == (verdict == "valid"), (
        f"Task 8.5: satisfies({compact(value)}, schema) returned {said}, but jsonschema finds the value {verdict} under "
        f"the schema {compact(schema)}: satisfies decides which enum and const values are written, and must answer as "
        f"JSON Schema does (a number includes the integers, true and false are neither, lengths count characters, "
        f"additionalProperties false refuses unlisted properties, enum and const compare as `same` all the way down)")


# ---------------------------------------------------------------- lone surrogates, refused in words UTF-8 can write
LONE = st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff"])
with_lone = st.builds(lambda a, s, b: a + s + b, st.text("aé😀", max_size=3), LONE, st.text("aé", max_size=3))


def placed(text: str):
    return st.sampled_from([text, ["ok", text], {text: 1}, {"k": [text]}, [[{"a": text}]], {"k": 1, "l": text}])


def readable(exc: Exception, what) -> str:
    """The refusal's message, checked to be text UTF-8 can write (what a reply carries)."""
    message = str(exc)
    try:
        message.encode("utf-8")
    except UnicodeEncodeError:
        pytest.fail(f"the refusal of {ascii(what)} cannot be written as UTF-8: {ascii(message)}. A 400's body is "
                    "UTF-8: a message that quotes the lone surrogate makes the server fail with a 500. Name the "
                    "problem in words, or escape what you quote")
    return message


@pytest.mark.task("8.4")
@given(with_lone.flatmap(placed), st.sampled_from(["enum", "const", "properties"]))
@example("\ud800", "enum").via("the first surrogate alone")
@example(["ok", "a\udfffb"], "const").via("the last, between characters")
@example({"\udc00": 1}, "properties").via("in a key")
@example({"k": ["é\ud800"]}, "enum").via("nested, after a non-ASCII character")
def test_a_lone_surrogate_is_refused_naming_it_in_text_utf8_can_write(value, keyword):
    with pytest.raises(PatternError) as refused:
        check_value(value, keyword)
    message = readable(refused.value, value)
    assert message.startswith(keyword), f"the refusal must start with {keyword!r}: {message}"
    assert "surrogate" in message, f"the refusal of {ascii(value)} must name the problem (a lone surrogate): {message}"


NULL = {"type": "null"}


@pytest.mark.task("8.5")
@pytest.mark.parametrize("schema,named", [
    ({"enum": ["ok", "a\ud800"]}, "enum"), ({"const": {"k": ["\udfff"]}}, "const"),
    ({"type": "string", "enum": ["x", "é\udbff"]}, "enum"), ({"type": "array", "items": {"const": "\ud800"}}, "const"),
    ({"type": "object", "properties": {"\udc00": NULL}}, "properties"), ({"properties": {"a\udfff": NULL}}, "properties"),
    ({"type": "string", "pattern": "a\ud800"}, "pattern"),
    ({"type": "integer", "enum": [1, "\ud800"]}, "enum"),  # refused, though the type would leave the string out
], ids=lambda v: ascii(v) if isinstance(v, dict) else v)
def test_a_schema_holding_a_lone_surrogate_is_refused_in_text_utf8_can_write(schema, named):
    with pytest.raises(PatternError) as refused:
        schema_to_regex(schema)
    message = readable(refused.value, schema)
    assert named in message, f"the refusal of {ascii(schema)} must name {named}: {message}"


@pytest.mark.ungraded  # the provided keyword checks, before any task's code runs
@pytest.mark.parametrize("schema,named", [
    ({"type": "\ud800"}, "type"), ({"type": ["null", "\udfff"]}, "type"), ({"required": ["\ud800", "\ud800"]}, "required"),
    ({"\ud800": 1}, "keyword"),
], ids=lambda v: ascii(v) if isinstance(v, dict) else v)
def test_a_keyword_of_the_wrong_kind_holding_a_lone_surrogate_is_refused_in_text_utf8_can_write(schema, named):
    test_a_schema_holding_a_lone_surrogate_is_refused_in_text_utf8_can_write(schema, named)
