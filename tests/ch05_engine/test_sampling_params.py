"""Task 5.1: sampling parameters checked once, at construction: each field's type, then its range."""

import math

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from miniyaie.engine import InvalidRequestError, SamplingParams
from miniyaie.engine.sampling_params import MAX_LOGPROBS, MAX_N

NAN, INF = math.nan, math.inf
ORDER = ["n", "max_tokens", "min_tokens", "temperature", "top_k", "top_p", "min_p", "repetition_penalty",
         "presence_penalty", "frequency_penalty", "seed", "stop", "stop_token_ids", "logprobs"]

BAD = {
    "n": [0, MAX_N + 1, -1, True, 1.0, "2"],
    "max_tokens": [0, -5, True, 2.5, "10"],
    "min_tokens": [-1, 257, True, 0.5],  # 257 > max_tokens (256 by default)
    "temperature": [-0.1, 100.5, NAN, INF, -INF, True, "1"],
    "top_k": [-2, 1.5, True, "5"],
    "top_p": [0, 0.0, 1.01, -0.5, NAN, INF, True],
    "min_p": [-0.1, 1.1, NAN, True],
    "repetition_penalty": [0, -1.0, 10.5, NAN, INF, True],
    "presence_penalty": [-2.1, 2.1, NAN, INF, True],
    "frequency_penalty": [-2.1, 2.1, NAN, -INF, False],
    "seed": [-1, 2**63, True, 1.5, "7"],
    "stop": [[""], ["x" * 257], ["s"] * 17, [3]],
    "stop_token_ids": [[-1], [True], [1.5], [3, "4"]],
    "logprobs": [-1, MAX_LOGPROBS + 1, True, 1.5],
}
EDGES = {
    "n": [1, MAX_N], "max_tokens": [1, 10**6], "temperature": [0, 0.0, 100, 1e-6], "top_k": [-1, 0, 1, 50_000],
    "top_p": [1, 1.0, 1e-9], "min_p": [0, 0.0, 1, 1.0], "repetition_penalty": [10, 1e-9, 1],
    "presence_penalty": [-2, 2, 0.0], "frequency_penalty": [-2.0, 2.0], "seed": [None, 0, 2**63 - 1],
    "stop_token_ids": [(), [0], (5, 7)], "logprobs": [None, 0, MAX_LOGPROBS],
}


@pytest.mark.task("5.1")
@pytest.mark.parametrize("name, value", [(name, value) for name, values in BAD.items() for value in values],
                         ids=lambda v: repr(v)[:20])
def test_a_value_outside_its_field_is_refused_naming_the_field(name, value):
    with pytest.raises(InvalidRequestError) as refused:
        SamplingParams(**{name: value})
    assert str(refused.value).startswith(name), (
        f"{name}={value!r} was refused with {str(refused.value)!r}: the message must start with the field's name")
    assert repr(value) in str(refused.value) or name in ("stop", "stop_token_ids"), "the message says the value given"


@pytest.mark.task("5.1")
@pytest.mark.parametrize("name, value", [(name, value) for name, values in EDGES.items() for value in values],
                         ids=lambda v: repr(v)[:20])
def test_the_edges_of_every_range_are_accepted(name, value):
    SamplingParams(**{name: value})


@pytest.mark.task("5.1")
def test_min_tokens_may_equal_max_tokens_but_not_exceed_it():
    SamplingParams(max_tokens=5, min_tokens=5)
    with pytest.raises(InvalidRequestError, match="^min_tokens"):
        SamplingParams(max_tokens=5, min_tokens=6)


@pytest.mark.task("5.1")
@given(st.data())
@example(data=None)
def test_a_request_with_two_bad_fields_is_refused_naming_one_of_them(data):
    """Any order of checks is correct; what must hold is that a value of the wrong kind in one field never
    reaches a comparison (a TypeError) while another field is checked, and that the message names a bad field."""
    if data is None:
        first, second = "temperature", "top_p"
        values = {"temperature": "1", "top_p": NAN}
    else:
        first, second = data.draw(st.lists(st.sampled_from(ORDER), min_size=2, max_size=2, unique=True))
        values = {first: data.draw(st.sampled_from(BAD[first])), second: data.draw(st.sampled_from(BAD[second]))}
    if "min_tokens" in values and (values["min_tokens"] == 257 or "max_tokens" in values):
        return  # min_tokens's range depends on max_tokens: not a pair of independent faults
    with pytest.raises(InvalidRequestError) as refused:
        SamplingParams(**values)
    message = str(refused.value)
    assert message.startswith(first) or message.startswith(second), (
        f"{values} was refused with {message!r}: the message must start with the name of a bad field")


@pytest.mark.task("5.1")
@given(st.fixed_dictionaries({}, optional={
    "n": st.integers(1, MAX_N), "max_tokens": st.integers(1, 4096), "temperature": st.floats(0, 100),
    "top_k": st.integers(-1, 10**5), "top_p": st.floats(0, 1, exclude_min=True), "min_p": st.floats(0, 1),
    "repetition_penalty": st.floats(0, 10, exclude_min=True), "presence_penalty": st.floats(-2, 2),
    "frequency_penalty": st.floats(-2, 2), "seed": st.none() | st.integers(0, 2**63 - 1),
    "stop_token_ids": st.lists(st.integers(0, 10**6), max_size=3), "logprobs": st.none() | st.integers(0, MAX_LOGPROBS),
}))
def test_every_value_inside_its_range_is_accepted(fields):
    params = SamplingParams(**fields)
    for name, value in fields.items():
        assert getattr(params, name) == (tuple(value) if name == "stop_token_ids" else value)


@pytest.mark.task("5.1")
@pytest.mark.parametrize("stop, words", [
    (["ok", 3], "int"), (["s"] * 17, "17 strings"), (["ok", ""], "empty"), (["x" * 257], "257 characters"),
    (["ok", "x" * 300, "x" * 260], "300 characters"),
], ids=["not-a-string", "too-many", "empty", "too-long", "the-longest-is-named"])
def test_a_bad_stop_list_is_refused_without_echoing_it(stop, words):
    """Each fault alone; then lists with two faults: the first in the contract's order is the one named."""
    with pytest.raises(InvalidRequestError, match=words) as refused:
        SamplingParams(stop=stop)
    message = str(refused.value)
    assert message.startswith("stop"), f"the message names the field first: {message!r}"
    assert "x" * 20 not in message and "'ok'" not in message, f"the message echoes the client's strings: {message!r}"


@pytest.mark.task("5.1")
def test_stop_lists_at_their_limits_are_accepted():
    assert SamplingParams(stop=["x" * 256] + ["s"] * 15).stop == ("x" * 256,) + ("s",) * 15
    assert SamplingParams(stop="one string").stop == ("one string",), "a single string is a list of one"
    assert SamplingParams(stop=None).stop == ()


@pytest.mark.task("5.1")
@pytest.mark.parametrize("stop, faults", [
    ([3] + ["s"] * 17, ("int", "18 strings")), (["s"] * 16 + [""], ("17 strings", "empty")),
    (["", "x" * 300], ("empty", "300 characters")), ([3, "x" * 300], ("int", "300 characters")),
], ids=["type-and-count", "count-and-empty", "empty-and-length", "type-and-length"])
def test_a_stop_list_with_two_faults_is_refused_for_one_of_them(stop, faults):
    """Any order of the checks is correct, as long as a non-string item never reaches len() or a comparison."""
    with pytest.raises(InvalidRequestError) as refused:
        SamplingParams(stop=stop)
    message = str(refused.value)
    assert message.startswith("stop") and any(f in message for f in faults), (
        f"refused with {message!r}: the message starts with the field and names one of the faults {faults}")
    assert "x" * 20 not in message, f"the message echoes the client's strings: {message!r}"


@pytest.mark.ungraded  # the given __post_init__, before Task 5.1's checks run
@pytest.mark.parametrize("field, value", [("stop", 5), ("stop", {"a": 1}), ("stop_token_ids", 7), ("stop_token_ids", "ab"),
                                          ("stop_token_ids", 0)])
def test_a_stop_field_that_is_not_a_list_is_refused_naming_it(field, value):
    with pytest.raises(InvalidRequestError, match=f"^{field} must be"):
        SamplingParams(**{field: value})
