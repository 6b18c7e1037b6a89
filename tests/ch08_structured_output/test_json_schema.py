"""Tasks 8.3 (arrays and objects), 8.4 (the values a schema carries) and 8.5 (a schema to its regex).

Each piece is checked against its language: the texts it must accept and
the wrong texts next to them that it must refuse (commas out of place,
members out of order, a required member missing, counts out of range, a
text that is not one of the enum's). Then the whole conversion, on schemas
hypothesis draws: the compact JSON of every value valid under a schema
matches its regex, and every text its regex matches is JSON valid under
the schema. `jsonschema` is the referee for validity. And the sizes: the
compiler's time follows the regex's length.
"""

import json
import math
import re

import jsonschema
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from miniyaie.structured import PatternError, array_regex, json_object_regex, object_regex, schema_to_regex
from miniyaie.structured.schema_values import MAX_VALUE_DEPTH, check_value
from miniyaie.structured.trie_regex import alternation


ALPHABET_JSON = st.characters(codec="utf-8", exclude_categories=["Cs"])


def compact(value) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


# ---------------------------------------------------------------- objects with optional members
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
@example(([False, True, False], [False, True, False])).via("an optional member before a required one, left out")
@example(([False, True, False], [True, True, True])).via("an optional member before a required one, written")
@example(([False], [False])).via("an empty object")
def test_every_choice_of_optional_members_matches_in_order(case):
    required, present = case
    regex = object_regex([(re.escape(member_text(i)), r) for i, r in enumerate(required)])
    text = "{" + ",".join(member_text(i) for i, p in enumerate(present) if p) + "}"
    assert re.fullmatch(regex, text), f"members {required} (True: required): {text} must match, the regex is {regex}"


@pytest.mark.task("8.3")
@given(members_and_choice())
@example(([True, False], [True, True]))
@example(([False, True, False], [True, True, False]))
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
def test_an_object_without_members_is_only_the_empty_object():
    assert re.fullmatch(object_regex([]), "{}"), f"no members: {{}} must match, the regex is {object_regex([])}"
    assert not re.fullmatch(object_regex([]), "{,}")


@pytest.mark.task("8.3")
@pytest.mark.parametrize("required", [[], [False], [True], [False, True, False], [True, False, True], [False] * 4],
                         ids=["no members", "one optional", "one required", "o r o", "r o r", "four optional"])
@settings(max_examples=25)
@given(st.data())
def test_every_text_an_object_regex_matches_is_such_an_object(required, data):
    regex = object_regex([(re.escape(member_text(i)), r) for i, r in enumerate(required)])
    text = data.draw(st.from_regex(regex, fullmatch=True), label="a text the regex matches")
    parts = text[1:-1].split(",") if text != "{}" else []
    written = [i for i in range(len(required)) if member_text(i) in parts]
    assert text[:1] == "{" and text[-1:] == "}" and len(written) == len(parts), (
        f"Task 8.3: the regex matches {text!r}, which is not an object of those members. The members: {required} "
        f"(True: required); the regex: {regex}")
    assert written == sorted(written) and [member_text(i) for i in written] == parts, (
        f"Task 8.3: the regex matches {text!r}, whose members are out of the schema's order. The regex: {regex}")
    missing = [i for i, r in enumerate(required) if r and i not in written]
    assert not missing, f"members {required} (True: required): {text!r} matches {regex} without m{missing[0]}"


def check_object_size(build, required: list[bool]) -> None:
    """The contract's bound: at most n x (the members' total length) + 6 n^2 + 8 characters."""
    members = [(re.escape(member_text(i)), r) for i, r in enumerate(required)]
    n, total = len(members), sum(len(m) for m, _ in members)
    bound = n * total + 6 * n * n + 8
    length = len(build(members))
    assert length <= bound, (
        f"{n} members ({sum(not r for r in required)} optional, {total} characters of member regexes) gave a regex of "
        f"{length} characters, over the bound n*total + 6n^2 + 8 = {bound}: some member's regex is written more than "
        f"n times. Spelling 'with' and 'without' for each optional member copies everything after it twice: 2^n")


SIZE_CASES = [[False] * 8, [False] * 16, [True] * 16, [i % 3 == 0 for i in range(16)], [i % 5 != 4 for i in range(16)]]
SIZE_IDS = ["8 optional", "16 optional", "16 required", "16 mixed", "16 mostly required"]


@pytest.mark.task("8.3")
@pytest.mark.parametrize("required", SIZE_CASES, ids=SIZE_IDS)
def test_the_object_regex_stays_polynomial_in_its_members_not_in_their_choices(required):
    """16 optional members have 65,536 subsets: the regex must not spell them (the compiler's time follows it)."""
    check_object_size(object_regex, required)
    members = [(re.escape(member_text(i)), r) for i, r in enumerate(required)]
    text = "{" + ",".join(member_text(i) for i in range(len(required)) if i % 2 or required[i]) + "}"
    assert re.fullmatch(object_regex(members), text), f"{text} must match"


def doubling_object_regex(members: list[tuple[str, bool]]) -> str:
    """A correct construction whose size doubles with each optional member: each is spelled 'with' and 'without'."""
    def rest(i: int, written: bool) -> str:
        if i == len(members):
            return ""
        member, required = members[i]
        now = ("," if written else "") + member + rest(i + 1, True)
        return now if required else "(" + now + "|" + rest(i + 1, written) + ")"
    return r"\{" + rest(0, False) + r"\}"


@pytest.mark.ungraded
@pytest.mark.parametrize("required", SIZE_CASES[:1], ids=SIZE_IDS[:1])
def test_the_size_bound_refuses_a_construction_that_doubles(required):
    """The bound above is not vacuous: the doubling construction (correct, but 2^n) fails it, and says why."""
    members = [(re.escape(member_text(i)), r) for i, r in enumerate(required)]
    assert re.fullmatch(doubling_object_regex(members), "{" + ",".join(member_text(i) for i in range(0, len(required), 3)) + "}")
    with pytest.raises(AssertionError, match="more than n times"):
        check_object_size(doubling_object_regex, required)


# ---------------------------------------------------------------- arrays
ITEM, ITEM_TEXTS = "(a|bc)", st.sampled_from(["a", "bc"])


@pytest.mark.task("8.3")
@given(st.integers(0, 4), st.one_of(st.none(), st.integers(0, 4)), st.lists(ITEM_TEXTS, max_size=9))
@example(0, 0, []).via("maxItems 0: only the empty array")
@example(0, 0, ["a"])
@example(0, None, [])
@example(1, 1, ["a"])
@example(1, 1, ["a", "a"])
@example(2, None, ["a"])
@example(0, 1, ["bc"])
@example(3, 3, ["a", "bc", "a"])
def test_an_array_has_low_to_high_items_with_one_comma_between(low, extra, items):
    high = None if extra is None else low + extra
    regex = array_regex(ITEM, low, high)
    text = "[" + ",".join(items) + "]"
    fits = low <= len(items) and (high is None or len(items) <= high)
    assert bool(re.fullmatch(regex, text)) == fits, (
        f"minItems {low}, maxItems {high}: {text} ({len(items)} items) must {'' if fits else 'not '}match; "
        f"the regex is {regex}")
    wrong = {"leading comma": "[," + ",".join(items) + "]", "trailing comma": "[" + ",".join(items) + ",]",
             "doubled comma": "[" + ",,".join(items) + "]" if len(items) > 1 else None,
             "no brackets": ",".join(items), "an empty item": "[" + ",".join([*items, ""]) + "]" if items else None}
    for what, bad in wrong.items():
        if bad is not None:
            assert not re.fullmatch(regex, bad), f"minItems {low}, maxItems {high}: {what} must not match: {bad}"


@pytest.mark.task("8.3")
@pytest.mark.parametrize("low,high", [(0, 0), (0, 1), (0, None), (1, 1), (1, 3), (2, None), (3, 3)])
@settings(max_examples=25)
@given(st.data())
def test_every_text_an_array_regex_matches_is_such_an_array(low, high, data):
    regex = array_regex(ITEM, low, high)
    text = data.draw(st.from_regex(regex, fullmatch=True), label="a text the regex matches")
    items = text[1:-1].split(",") if text != "[]" else []
    assert text[:1] == "[" and text[-1:] == "]" and all(i in ("a", "bc") for i in items), (
        f"minItems {low}, maxItems {high}: {text!r} matches {regex} but is not an array of a / bc")
    assert low <= len(items) and (high is None or len(items) <= high), (
        f"minItems {low}, maxItems {high}: {text!r} ({len(items)} items) matches {regex}")


@pytest.mark.task("8.3")
@pytest.mark.parametrize("low,high", [(0, 200), (200, 256), (0, None), (1, 256)])
def test_the_array_regex_does_not_grow_with_its_counts(low, high):
    item = '"x":(a|bc)'
    regex = array_regex(item, low, high)
    assert len(regex) <= 3 * len(item) + 40, (
        f"minItems {low}, maxItems {high}: {len(regex)} characters for an item of {len(item)}: write the count, "
        "not the item once per count")
    assert re.fullmatch(regex, "[" + ",".join([item.replace("(a|bc)", "a")] * max(low, 1)) + "]")


# ---------------------------------------------------------------- enums: a list of texts, factored like a trie
TRICKY = st.sampled_from(["a", "b", "é", ".", "*", "(", ")", "[", "]", "|", "?", "\\", "^", "$", " ", "{", "}", "1", ","])
texts_lists = st.lists(st.text(TRICKY, max_size=5), min_size=1, max_size=8)


@pytest.mark.task("8.4")
@given(texts_lists, st.text(TRICKY, max_size=6))
@example(["a", "ab"], "abb").via("one text a prefix of another")
@example(["ab", "a"], "").via("the same, in the other order")
@example([""], "a").via("only the empty text")
@example(["", "a"], "b")
@example(["a.b", "[1,2]", "(x)?"], "axb").via("regex metacharacters taken literally")
@example(["x{2}", "a{1,3}"], "xx").via("braces are text, not a count")
@example(["apple", "apricot", "banana"], "ap")
@example(["a", "a"], "aa").via("a text twice")
def test_a_list_of_texts_matches_exactly_those_texts(texts, other):
    regex = alternation(texts)
    for text in texts:
        assert re.fullmatch(regex, text), f"Task 8.4: {text!r} is one of the texts and must match. The texts: {texts}; the regex: {regex!r}"
        assert re.fullmatch("<" + regex + ">", "<" + text + ">"), (
            f"Task 8.4: the regex must work next to others (no '|' outside a group). The texts: {texts}; the regex: {regex!r}")
    near = {other, *(t + "a" for t in texts), *(t[:-1] for t in texts if t), *("a" + t for t in texts)}
    for text in near - set(texts):
        assert not re.fullmatch(regex, text), (
            f"Task 8.4: {text!r} is not one of the texts but matches (every character is literal). The texts: {texts}; "
            f"the regex: {regex!r}")


@pytest.mark.task("8.4")
def test_a_text_of_thousands_of_characters_is_no_problem():
    """A 5,000-character const is a legal request (chapter 8's Limits): no recursion one level per character."""
    texts = ["x" * 5000, "x" * 4999 + "y", "z"]
    regex = alternation(texts)
    assert all(re.fullmatch(regex, t) for t in texts) and not re.fullmatch(regex, "x" * 4999)


def prefixes(texts: list[str]) -> int:
    return len({t[:i] for t in texts for i in range(1, len(t) + 1)})


@pytest.mark.task("8.4")
@pytest.mark.parametrize("texts", [
    ["the same long prefix, then " + str(i) for i in range(200)],
    [f"{i:04d}.{j}" for i in range(30) for j in range(10)],
    ["x" * i for i in range(1, 60)],
], ids=["shared prefix", "two levels", "each a prefix of the next"])
def test_a_prefix_that_texts_share_is_written_once(texts):
    regex = alternation(texts)
    bound = 6 * prefixes(texts) + 3
    assert len(regex) <= bound, (
        f"{len(texts)} texts with {prefixes(texts)} distinct prefixes gave {len(regex)} characters (bound {bound}): "
        "a prefix that several texts share must be written once")
    assert all(re.fullmatch(regex, t) for t in texts[::7])


# ---------------------------------------------------------------- the whole conversion
ENUM_VALUES = ["a", "b c", "ü", "a.b", "[1]", "(x)?", 1.5, -2, 0, True, None, [1, "x"], {"k": None}, {"a": [True]}]
leaves = st.one_of(
    st.sampled_from([
        {"type": "integer"}, {"type": "number"}, {"type": "boolean"}, {"type": "null"},
        {"type": "string", "maxLength": 5}, {"type": "string", "minLength": 1, "maxLength": 3},
        {"type": "string", "enum": ["a", "b c", "ü"]}, {"const": 7}, {"type": ["integer", "null"]},
        {"type": "string", "pattern": "[a-z]{2}[0-9]"}, {"const": {"k": [1, "é"]}},
        {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 2}, {"const": [None]}]},
        {"type": ["string", "array", "null"], "maxLength": 2, "maxItems": 1, "items": {"type": "boolean"}},
        {"type": "string", "enum": [1, "a", "é", None, "long"], "maxLength": 2}, {"type": "integer", "enum": [1.5, 2, True]},
        {"type": "array"}, {"type": "object"}, {"properties": {"q": {"type": "null"}}, "required": ["q"]},
    ]),
    st.lists(st.sampled_from(ENUM_VALUES), min_size=1, max_size=5).map(lambda values: {"enum": values}),
)


def objects(children):
    return st.dictionaries(st.sampled_from(["id", "name", "tags", "x", "é", "a.b"]), children, min_size=1,
                           max_size=5).flatmap(
        lambda props: st.lists(st.sampled_from(sorted(props)), unique=True).map(
            lambda req: {"type": "object", "properties": props, "required": req}))


def arrays(children):
    return st.builds(lambda items, low, extra: {"type": "array", "items": items, "minItems": low,
                                                **({} if extra is None else {"maxItems": low + extra})},
                     children, st.integers(0, 2), st.one_of(st.none(), st.integers(0, 2)))


schemas = st.recursive(leaves, lambda children: st.one_of(objects(children), arrays(children)), max_leaves=6)
JUDGED_ENUMS = [  # enums JSON Schema judges as the regex would not: a const beside an enum, typed objects and arrays
    {"const": 1, "enum": [True, 1, "x"]}, {"type": "object", "enum": [{"a": 1}, {"b": [2]}, [3]]},
    {"type": "array", "enum": [[1, "x"], "x", []], "maxItems": 1}, {"type": "integer", "enum": [1.0, 2.5, True]},
    {"type": "string", "enum": ["abc", "xyz"], "pattern": "b"}]
conversions = st.recursive(leaves | st.sampled_from(JUDGED_ENUMS),
                           lambda children: st.one_of(objects(children), arrays(children)), max_leaves=6)
EXAMPLE_SCHEMA = {"type": "object", "properties": {"a.b": {"enum": ["[1]", 1.5, {"k": None}]},
                                                   "tags": {"type": "array", "items": {"const": "é"}, "maxItems": 2},
                                                   "id": {"type": "integer"}}, "required": ["id"]}


def with_value(schema):
    from hypothesis_jsonschema_lite import values_of

    return st.tuples(st.just(schema), values_of(schema))


@pytest.mark.task("8.5")
@settings(suppress_health_check=[HealthCheck.too_slow])
@given(conversions.flatmap(with_value))
@example((EXAMPLE_SCHEMA, {"a.b": {"k": None}, "tags": ["é", "é"], "id": 0})).via("metacharacters, a const item, optionals")
@example((EXAMPLE_SCHEMA, {"tags": [], "id": -3}))
@example(({"type": "array", "items": {"enum": [[1, "x"], "a.b"]}, "minItems": 1}, [[1, "x"], "a.b", [1, "x"]]))
@example(({"type": "object", "properties": {"v": {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 2}]},
                                           "w": {"type": ["null", "boolean"]}}}, {"v": "ab", "w": True}))
def test_values_valid_under_a_schema_match_its_regex(case):
    schema, value = case
    jsonschema.validate(value, schema)
    assert re.fullmatch(schema_to_regex(schema), compact(value)), (
        f"Task 8.5: the regex must match the compact JSON of every value valid under the schema; it refuses "
        f"{compact(value)}, which jsonschema finds valid. The schema: {schema}")


def with_text(schema):
    return st.tuples(st.just(schema), st.from_regex(schema_to_regex(schema), fullmatch=True))


@pytest.mark.task("8.5")
@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(conversions.flatmap(with_text))
@example((EXAMPLE_SCHEMA, '{"a.b":1.5,"id":7}'))
@example((EXAMPLE_SCHEMA, '{"tags":["é"],"id":-1}'))
@example(({"type": "array", "items": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}, "null"))
@example(({"type": "object", "properties": {"a": {"type": "string"}}, "enum": [{"a": 1}, {"a": "x"}]}, '{"a":1}'))
@example(({"type": "object", "required": ["b"], "enum": [{"a": 1}, {"b": 2}]}, '{"a":1}'))
@example(({"type": "array", "items": {"type": "integer"}, "enum": [[1, "x"], [2]]}, '[1,"x"]'))
@example(({"type": "object", "properties": {"a": {"const": 1}}, "enum": [{"a": 1}, {"a": 2}]}, '{"a":2}')).via(
    "an enum value a nested const refuses")
@example(({"type": "number", "enum": ["a", 1, 2.5]}, '"a"')).via("a string is not a number")
@example(({"type": ["integer", "null"], "enum": [1.5, 2, None]}, '1.5')).via("1.5 is not an integer")
def test_every_text_the_regex_matches_is_valid_under_the_schema(case):
    schema, text = case
    if not re.fullmatch(schema_to_regex(schema), text):
        return  # only an explicit example can miss (a text a wrong regex would let through); drawn texts match
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AssertionError(f"Task 8.5: the regex must match only JSON valid under the schema; it matches {text!r}, "
                             f"which is not JSON ({exc}). The schema: {schema}") from None
    errors = [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(value)]
    assert not errors, (f"Task 8.5: the regex must match only JSON valid under the schema; it matches {text!r}, "
                        f"which jsonschema refuses ({errors[0]}). The schema: {schema}")


@pytest.mark.task("8.5")
@pytest.mark.parametrize("schema,keyword", [
    ({"type": "string", "enum": [1, 2]}, "enum"),
    ({"type": "string", "const": 5}, "const"),
    ({"type": "integer", "enum": [1.5, "1"]}, "enum"),
    ({"enum": ["abc"], "type": "string", "maxLength": 2}, "enum"),
    ({}, "type"),
    ({"title": "no type"}, "type"),
], ids=["enum of no string", "const of the wrong type", "enum of no integer", "enum too long", "empty", "annotations only"])
def test_a_schema_that_leaves_nothing_to_write_is_refused_by_name(schema, keyword):
    why = (f"no value of its {keyword} is valid under the schema's other keywords: an enum or const keeps only the "
           f"values they allow, and one that keeps none is refused naming {keyword!r}" if keyword != "type"
           else "with no type, no enum, no anyOf and no properties there is nothing to write: refused naming 'type'")
    try:
        regex = schema_to_regex(schema)
    except PatternError as refused:
        assert keyword in str(refused), f"Task 8.5: the refusal must name {keyword!r}: {refused}. The schema: {schema}"
    else:
        pytest.fail(f"Task 8.5: the schema leaves nothing to write, yet it was converted: {why}. The schema: {schema}; "
                    f"the regex: {regex[:120]!r}")


def nested(keyword: str, levels: int) -> dict:
    schema = {"type": "integer"}
    for _ in range(levels):
        schema = {"items": {"type": "array", "items": schema}, "properties": {"type": "object", "properties": {"p": schema}},
                  "anyOf": {"anyOf": [schema]}}[keyword]
    return schema


@pytest.mark.task("8.5")
@pytest.mark.parametrize("keyword", ["items", "properties", "anyOf"])
def test_each_subschema_is_one_level_deeper(keyword):
    """The depth cap (MAX_DEPTH levels below the top) holds through every keyword that holds a subschema."""
    from miniyaie.structured.json_schema import MAX_DEPTH

    rule = (f"each subschema ({keyword}'s) is one level deeper than the schema holding it, and a schema nested "
            f"deeper than MAX_DEPTH = {MAX_DEPTH} levels below the top is refused with a PatternError saying 'deeper'")
    try:
        schema_to_regex(nested(keyword, MAX_DEPTH))
    except PatternError as refused:
        pytest.fail(f"Task 8.5: {MAX_DEPTH} levels of {keyword} were refused ({refused}): they are within the cap: {rule}")
    try:
        schema_to_regex(nested(keyword, MAX_DEPTH + 1))
    except PatternError as refused:
        assert "deeper" in str(refused), f"Task 8.5: {MAX_DEPTH + 1} levels of {keyword}: the refusal must say 'deeper': {refused}"
    else:
        pytest.fail(f"Task 8.5: {MAX_DEPTH + 1} levels of {keyword} were converted, the depth cap not reached: {rule}")


@pytest.mark.task("8.5")
@pytest.mark.parametrize("keyword", ["items", "properties", "anyOf"])
def test_a_schema_nested_hundreds_deep_is_refused_by_keyword_without_a_recursion_error(keyword):
    """A client's schema 300 levels deep: a 400 naming the keyword, never a RecursionError (a 500)."""
    from miniyaie.structured.json_schema import MAX_DEPTH

    try:
        schema_to_regex(nested(keyword, 300))
    except PatternError as refused:
        assert re.match(rf"{keyword}\b", str(refused)) and "deeper" in str(refused), (
            f"Task 8.5: {keyword} 300 levels deep: the refusal must start with the keyword and say 'deeper': {refused}")
    except RecursionError:
        pytest.fail(f"Task 8.5: {keyword} 300 levels deep raised RecursionError: each subschema ({keyword}'s) is one "
                    f"level deeper, so the depth cap (MAX_DEPTH = {MAX_DEPTH}) refuses it long before Python's stack ends")
    else:
        pytest.fail(f"Task 8.5: {keyword} 300 levels deep was converted: each subschema ({keyword}'s) is one level "
                    f"deeper, and a schema deeper than MAX_DEPTH = {MAX_DEPTH} is refused")


NULL = {"type": "null"}


@pytest.mark.task("8.5")
@pytest.mark.parametrize("schema,named", [
    ({"enum": 5}, "enum"), ({"enum": list(range(1001))}, "enum: entries 1001 is over the limit of 1000"),
    ({"const": 1, "enum": [True]}, "const"), ({"enum": [1], "const": True}, "const"), ({"const": {1, 2}}, "const"),
    ({"enum": [1, [math.inf]]}, "enum"), ({"const": "\udfff"}, "const"),
    ({"anyOf": 5}, "anyOf"), ({"anyOf": []}, "anyOf"), ({"anyOf": [NULL] * 1001}, "anyOf: entries 1001 is over the limit of 1000"),
    ({"anyOf": [NULL], "type": "null"}, "'type'"), ({"anyOf": [NULL], "title": "t", "maxItems": 2}, "'maxItems'"),
    ({"type": "object", "properties": {"\ud800": NULL}}, "properties"),
    ({"properties": {"a": NULL}, "required": ["a", "b"]}, "'b'"),
    ({"type": ["null", "object"], "properties": {}, "required": ["b"]}, "'b'"),
    ({"type": "array", "minItems": 3, "maxItems": 2}, "maxItems"), ({"type": "array", "maxItems": 0, "minItems": 1}, "maxItems"),
    ({"type": ["array", "null"], "minItems": 3, "maxItems": 1}, "maxItems"),  # "array" in a list of types too
    ({"type": ["null", "string"], "minLength": 3, "maxLength": 2}, "maxLength"),
], ids=lambda v: None if isinstance(v, dict) else v)
def test_a_schema_the_conversion_cannot_honour_is_refused_by_name(schema, named):
    try:
        schema_to_regex(schema)
    except PatternError as refused:
        either = {named, named.replace("'", '"')}  # a name quoted either way
        assert any(n in str(refused) for n in either), (
            f"Task 8.5: the refusal must name {named}: {refused}. The schema: {str(schema)[:80]}")
    else:
        pytest.fail(f"Task 8.5: the schema was converted, but {why_refused(schema)}: refuse it with a PatternError "
                    f"naming {named}. The schema: {str(schema)[:80]}")


def why_refused(schema: dict) -> str:
    """The rule of check_structure's contract that refuses `schema`, for the failure message."""
    if "const" in schema and "enum" in schema:
        return "a const beside an enum must be one of the enum's values (JSON Schema checks both), or nothing is left"
    if "const" in schema or "enum" in schema:
        return "an enum that is not a list, over max_enum, or holding a value JSON or UTF-8 cannot write is refused"
    if "anyOf" in schema:
        return ("an anyOf that is not a list, is empty or has more branches than max_enum is refused, and so is any "
                "keyword beside it but annotations (it belongs inside each branch)")
    if any(any(0xD800 <= ord(c) <= 0xDFFF for c in name) for name in schema.get("properties", {})):
        return "a property name holding a lone surrogate (no UTF-8 spelling) is refused, naming properties"
    if "required" in schema:
        return "a required property that is not among the properties is refused, naming it"
    return "bounds that contradict each other are refused wherever their type is allowed, alone or in a list"


@pytest.mark.task("8.5")
@pytest.mark.parametrize("schema,text", [
    ({"anyOf": [NULL], "title": "t", "description": "d"}, "null"), ({"type": "array", "maxItems": 0}, "[]"),
    ({"type": "array", "minItems": 2, "maxItems": 2, "items": NULL}, "[null,null]"),
    ({"type": "string", "minLength": 1, "maxLength": 1}, '"x"'), ({"enum": list(range(1000))}, "999"),
    ({"anyOf": [{"const": i} for i in range(1000)]}, "999"), ({"const": [[[1]]]}, "[[[1]]]"),
    ({"properties": {"a": NULL}, "required": ["a"]}, '{"a":null}'),
    ({"type": "string", "properties": {"a": NULL}, "required": ["b"]}, '"x"'),
    ({"type": "string", "minItems": 3, "maxItems": 2}, '"x"'), ({"type": "array", "minLength": 3, "maxLength": 2}, "[]"),
    ({"type": "object", "enum": [{"a": 1}]}, '{"a":1}'), ({"type": "array", "enum": [[1, "x"]]}, '[1,"x"]'),
    ({"type": "string", "enum": ["abc"], "pattern": "b"}, '"abc"'), ({"type": "integer", "enum": [1.0]}, "1.0"),
    ({"const": 2, "enum": [1, 2]}, "2"),
], ids=lambda v: None if isinstance(v, dict) else v)
def test_a_schema_within_the_rules_is_not_refused(schema, text):
    try:
        regex = schema_to_regex(schema)
    except PatternError as refused:
        pytest.fail(f"Task 8.5: the schema was refused ({refused}), but jsonschema finds {text} valid under it: "
                    f"{WITHIN_THE_RULES}. The schema: {str(schema)[:80]}")
    assert re.fullmatch(regex, text), (
        f"Task 8.5: the schema is within the rules: its regex must match {text}. The schema: {str(schema)[:80]}")


WITHIN_THE_RULES = ("a keyword applies to the values of its type only (minItems to arrays), 'integer' includes 1.0, "
                    "a pattern is searched for (\"b\" allows \"abc\"), an object may hold unlisted properties: an enum "
                    "keeps what JSON Schema accepts")


@pytest.mark.task("8.5")
def test_enum_values_the_other_keywords_refuse_are_left_out():
    regex = schema_to_regex({"type": "string", "enum": [1, "a", "é", None, "long", [1]], "maxLength": 2})
    assert re.fullmatch(regex, '"a"') and re.fullmatch(regex, '"é"'), f"the strings of the enum must match: {regex}"
    for text in ["1", "null", '"long"', "[1]"]:
        assert not re.fullmatch(regex, text), (
            f"Task 8.5: the regex matches {text}, which is in the enum but not a string of at most 2 characters: an "
            f"enum keeps only the values the schema's other keywords allow. The regex: {regex}")


def nesting(value) -> int:
    """Levels of objects and arrays: 0 for a scalar, 1 for [] or {"a": 1}, 2 for [[1]]."""
    children = list(value.values()) if isinstance(value, dict) else value if isinstance(value, list) else None
    return 0 if children is None else 1 + max(map(nesting, children), default=0)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.floats(-1e3, 1e3, allow_nan=False).map(lambda x: round(x, 2))
    | st.text(ALPHABET_JSON, max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(ALPHABET_JSON, max_size=3), inner, max_size=3),
    max_leaves=8)


@pytest.mark.task("8.3")
@given(st.integers(0, 3), json_values)
@example(2, {"a": [{"b": 1}], "c": {}})
@example(2, {"a": [[[1]]]})
@example(0, {})
@example(0, {"a": []})
@example(1, [1])
@example(1, "x")
@example(1, {"a": 'q"\\\n\t\x01é😀', "q\"": None}).via("escapes in values and keys")
def test_the_json_object_regex_matches_objects_nested_at_most_depth_levels(depth, value):
    text = compact(value)
    fits = isinstance(value, dict) and nesting(value) <= depth + 1
    what = (f"an object whose values nest {nesting(value) - 1} levels, counted as the docstring counts: "
            f"a list or object of scalars is one level, the top object none" if isinstance(value, dict)
            else "not an object")
    assert bool(re.fullmatch(json_object_regex(depth), text)) == fits, (
        f"depth {depth}: {text} must {'' if fits else 'not '}match: it is {what}")


def json_object_texts(depth: int):
    return st.tuples(st.just(depth), st.from_regex(json_object_regex(depth), fullmatch=True))


@pytest.mark.task("8.3")
@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.integers(0, 2).flatmap(json_object_texts))
@example((1, '{"a":"\x01"}')).via("a control character written raw: JSON wants it escaped")
@example((1, '{"a":"\\u"}')).via("\\u without its four hex digits")
@example((1, '{"a":"\\u12"}')).via("\\u with two hex digits")
@example((0, '{"\x1f":1}')).via("a control character in a key")
@example((1, '{"a":"\\x41"}')).via("an escape JSON does not have")
def test_every_text_the_json_object_regex_matches_is_json(case):
    depth, text = case
    if not re.fullmatch(json_object_regex(depth), text):
        return  # only an explicit example can miss (a text a wrong regex would let through); drawn texts match
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        raise AssertionError(f"Task 8.3: json_object_regex({depth}) must match only JSON; it matches {text!r}, which "
                             f"is not JSON ({exc}): a string's characters are STRING_CHAR's") from None


@pytest.mark.task("8.5")
@pytest.mark.parametrize("schema,keyword", [
    ({"type": "object", "properties": {"a": {"type": "string", "format": "email"}}}, "format"),
    pytest.param({"type": "integer", "minimum": 3}, "minimum", marks=pytest.mark.ungraded),  # provided: these four pass on the stubs
    pytest.param({"$ref": "#/definitions/x"}, "$ref", marks=pytest.mark.ungraded),
    pytest.param({"type": "object", "additionalProperties": True}, "additionalProperties", marks=pytest.mark.ungraded),
    pytest.param({"allOf": [{"type": "string"}]}, "allOf", marks=pytest.mark.ungraded),
])
def test_an_unsupported_keyword_is_refused_by_name(schema, keyword):
    with pytest.raises(PatternError, match=re.escape(repr(keyword))):
        schema_to_regex(schema)


# ---------------------------------------------------------------- the values a schema carries
def deepest(value, depth: int = 0) -> int:
    """The level of the deepest thing in value: the value at 0, list items and dict keys/values one below."""
    todo, worst = [(value, depth)], depth
    while todo:
        item, level = todo.pop()
        worst = max(worst, level)
        if isinstance(item, list):
            todo += [(x, level + 1) for x in item]
        elif isinstance(item, dict):
            todo += [(x, level + 1) for pair in item.items() for x in pair]
    return worst


def unwritable(value) -> bool:
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return True
        if isinstance(item, str) and any(0xD800 <= ord(c) <= 0xDFFF for c in item):
            return True
        todo += item if isinstance(item, list) else [x for pair in item.items() for x in pair] if isinstance(item, dict) else []
    return False


def wrapped(value, levels: int):
    for _ in range(levels):
        value = [value]
    return value


def in_dicts(value, levels: int):
    for _ in range(levels):
        value = {"a": value}
    return value


carried_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(st.characters(codec="utf-8") | st.sampled_from(["\ud800", "\udfff"]), max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2) | st.just("\udc00"), inner, max_size=2),
    max_leaves=6).flatmap(lambda v: st.sampled_from([v, wrapped(v, 30), wrapped(v, 33)]))


@pytest.mark.task("8.4")
@given(carried_values, st.sampled_from(["enum", "const", "properties"]))
@example(wrapped(1, 32), "enum").via("32 levels: the limit")
@example(wrapped(1, 33), "enum").via("33 levels")
@example(wrapped([], 32), "const").via("an empty list at 32 holds nothing deeper")
@example(wrapped({"k": 1}, 31), "const").via("a dict at 31: its key and value at 32")
@example(in_dicts(1, 32), "enum").via("32 dicts around 1")
@example(in_dicts(1, 33), "enum").via("33 dicts around 1")
@example(["a\udfff"], "enum").via("the last surrogate")
@example({"a": {"\ud800": 1}}, "properties").via("a surrogate in a key")
@example([1.5, math.inf], "enum")
@example([math.nan], "enum")
@example(1e400, "const").via("1e400 is infinity")
def test_a_value_json_or_utf8_cannot_write_is_refused_naming_its_keyword(value, keyword):
    depth = deepest(value)  # said as a number: nobody should count 32 brackets by eye
    why = ("it holds an infinity, a NaN or a lone surrogate" if unwritable(value)
           else f"it is {depth} levels deep, over the limit of {MAX_VALUE_DEPTH}" if depth > MAX_VALUE_DEPTH else None)
    try:
        returned = check_value(value, keyword)
    except PatternError as refused:
        assert why is not None, (f"{keyword}: a value {depth} levels deep (the limit is {MAX_VALUE_DEPTH}, the value "
                                 f"itself at level 0) that JSON can write was refused: {refused}")
        assert str(refused).startswith(keyword), f"the refusal must start with {keyword!r}: {refused}"
    else:
        assert why is None, f"{keyword}: a value was accepted, but {why}: it must be refused with a PatternError"
        assert returned is None, f"check_value returns None for a value it accepts, not {returned!r}"


@pytest.mark.task("8.4")
def test_a_value_nested_far_too_deep_is_refused_without_recursing_over_it():
    value = wrapped("x", 100_000)
    with pytest.raises(PatternError, match="enum") as refused:
        check_value(value, "enum")
    assert "deep" in str(refused.value), f"a value nested 100,000 lists deep must be refused as too deep: {refused.value}"
