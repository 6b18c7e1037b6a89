"""Task 8.3 (objects with optional members) and the schema-to-regex conversion around it.

The regex is checked against what it must accept (the compact JSON of
values valid under the schema: hypothesis draws schemas and values) and
what it must refuse (commas out of place, members out of order, a required
member missing). `jsonschema` is the referee for validity.
"""

import json
import re

import jsonschema
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from miniyaie.structured import PatternError, object_regex, schema_to_regex


def compact(value) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@st.composite
def members_and_choice(draw):
    """Members m0..mk (regex "mi":i, required or not) and which optional ones a value includes."""
    required = draw(st.lists(st.booleans(), min_size=1, max_size=6))
    present = [r or draw(st.booleans()) for r in required]
    return required, present


def member_text(i: int) -> str:
    return f'"m{i}":{i}'


@pytest.mark.task("8.3")
@given(members_and_choice())
@example(([True, False, False], [True, False, True])).via("required first, the middle optional one left out")
@example(([False, False], [False, True])).via("the first member left out: no leading comma")
@example(([False], [False])).via("an empty object")
def test_every_choice_of_optional_members_matches_in_order(case):
    required, present = case
    regex = object_regex([(re.escape(member_text(i)), r) for i, r in enumerate(required)])
    text = "{" + ",".join(member_text(i) for i, p in enumerate(present) if p) + "}"
    assert re.fullmatch(regex, text), f"members {required} (True: required): {text} must match, the regex is {regex}"


@pytest.mark.task("8.3")
@given(members_and_choice())
@example(([True, False], [True, True]))
def test_misplaced_commas_missing_required_and_reordered_members_do_not_match(case):
    required, present = case
    regex = object_regex([(re.escape(member_text(i)), r) for i, r in enumerate(required)])
    kept = [member_text(i) for i, p in enumerate(present) if p]
    wrong = {"leading comma": "{," + ",".join(kept) + "}", "trailing comma": "{" + ",".join(kept) + ",}",
             "no commas": "{" + "".join(kept) + "}" if len(kept) > 1 else None,
             "doubled comma": "{" + ",,".join(kept) + "}" if len(kept) > 1 else None,
             "reversed order": "{" + ",".join(reversed(kept)) + "}" if len(kept) > 1 else None}
    for i, r in enumerate(required):
        if r:
            wrong[f"required m{i} missing"] = "{" + ",".join(member_text(j) for j, p in enumerate(present) if p and j != i) + "}"
    for what, text in wrong.items():
        if text is not None:
            assert not re.fullmatch(regex, text), f"members {required} (True: required): {what} must not match: {text}"


@pytest.mark.task("8.3")
@pytest.mark.parametrize("required", [[False] * 12, [True] * 12, [i % 3 == 0 for i in range(12)]],
                         ids=["all optional", "all required", "mixed"])
def test_the_object_regex_grows_with_the_square_of_its_members_not_with_their_choices(required):
    """12 optional members have 4,096 subsets: the regex must not spell each (the compiler's time follows it)."""
    members = [(re.escape(member_text(i)), r) for i, r in enumerate(required)]
    regex = object_regex(members)
    longest = max(len(m) for m, _ in members)
    assert len(regex) <= len(members) ** 2 * (longest + 8) + 16, (
        f"{len(regex)} characters for {len(members)} members of at most {longest}: at most about n^2 copies of a member")
    assert re.fullmatch(regex, "{" + ",".join(member_text(i) for i in range(12) if i % 2 or required[i]) + "}")


# ---------------------------------------------------------------- the conversion around Task 8.3 (provided code)
leaves = st.sampled_from([
    {"type": "integer"}, {"type": "number"}, {"type": "boolean"}, {"type": "null"},
    {"type": "string", "maxLength": 5}, {"type": "string", "minLength": 1, "maxLength": 3},
    {"type": "string", "enum": ["a", "b c", "ü"]}, {"const": 7}, {"type": ["integer", "null"]},
    {"type": "string", "pattern": "[a-z]{2}[0-9]"},
])


def objects(children):
    return st.dictionaries(st.sampled_from(["id", "name", "tags", "x", "é"]), children, min_size=1, max_size=4).flatmap(
        lambda props: st.lists(st.sampled_from(sorted(props)), unique=True).map(
            lambda req: {"type": "object", "properties": props, "required": req}))


def arrays(children):
    return st.builds(lambda items, low, extra: {"type": "array", "items": items, "minItems": low, "maxItems": low + extra},
                     children, st.integers(0, 2), st.integers(0, 2))


schemas = st.recursive(leaves, lambda children: st.one_of(objects(children), arrays(children)), max_leaves=6)


@pytest.mark.ungraded
@given(schemas, st.data())
def test_values_valid_under_a_schema_match_its_regex(schema, data):
    from hypothesis_jsonschema_lite import values_of

    value = data.draw(values_of(schema))
    jsonschema.validate(value, schema)
    assert re.fullmatch(schema_to_regex(schema), compact(value)), f"{compact(value)} is valid under {schema}"


@pytest.mark.ungraded
@pytest.mark.parametrize("schema,keyword", [
    ({"type": "object", "properties": {"a": {"type": "string", "format": "email"}}}, "format"),
    ({"type": "integer", "minimum": 3}, "minimum"),
    ({"$ref": "#/definitions/x"}, "$ref"),
    ({"type": "object", "additionalProperties": True}, "additionalProperties"),
    ({"allOf": [{"type": "string"}]}, "allOf"),
])
def test_an_unsupported_keyword_is_refused_by_name(schema, keyword):
    with pytest.raises(PatternError, match=re.escape(repr(keyword))):
        schema_to_regex(schema)
