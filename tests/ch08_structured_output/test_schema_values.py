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
from hypothesis import example, given
from hypothesis import strategies as st

from miniyaie.structured import PatternError, schema_to_regex
from miniyaie.structured.schema_values import check_value


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
