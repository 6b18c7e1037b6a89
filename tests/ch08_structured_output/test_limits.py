"""Structured output under hostile input: the limits, the compile budget, cancellation, bounded memory.

Provided code around the chapter's tasks (limits.py, regex_check.py, the index cache): every
refusal is a PatternError (HTTP 400) naming the keyword and the limit, a compile stops when its
budget or its request says so, and the index cache keeps its bytes within the operator's budget.
Small byte vocabularies keep these fast.
"""

import re
import threading
import time

import pytest
from byte_vocabularies import byte_vocabulary

from miniyaie.engine import SamplingParams
from miniyaie.structured import CompileCancelled, Constraints, Limits, PatternError

SLOW = SamplingParams(json_schema={"type": "string", "minLength": 500})  # seconds to compile on any machine


def constraints(size: int = 300, **limits) -> Constraints:
    return Constraints(byte_vocabulary(size=size), size, Limits(**limits))


@pytest.mark.task("8.6")
@pytest.mark.parametrize("params,message", [
    (dict(regex="a{1000000}"), "guided_regex: the repetition count 1000000 is over the limit of 1000"),
    (dict(regex="(a{900}){900}"), "max_states"),
    (dict(regex="(a|b)*a(a|b){14}"), "over the limit of 20000 (structured limit max_states)"),
    (dict(regex="[\x00-\U0010ffff]"), "max_class_chars"),
    pytest.param(dict(json_schema={"type": "array", "items": {"type": "integer"}, "maxItems": 10**29}),  # these five: provided
                 "maxItems 100000000000000000000000000000 is over the limit of 256 (structured limit max_items)",
                 marks=pytest.mark.ungraded),  # checks that refuse before any task's code runs (they pass on the stubs)
    pytest.param(dict(json_schema={"type": "string", "maxLength": 501}), "maxLength 501 is over the limit of 500", marks=pytest.mark.ungraded),
    pytest.param(dict(json_schema={"type": "string", "minLength": 10**6}), "minLength 1000000 is over the limit of 500", marks=pytest.mark.ungraded),
    pytest.param(dict(json_schema={"type": "array", "minItems": 300}), "minItems 300 is over the limit of 256", marks=pytest.mark.ungraded),
    (dict(json_schema={"enum": list(range(1001))}), "enum: entries 1001 is over the limit of 1000"),
    pytest.param(dict(choice=[str(i) for i in range(1001)]), "guided_choice: entries 1001 is over the limit of 1000", marks=pytest.mark.ungraded),
    (dict(regex="a" * 100_001), "the regex's length 100001 is over the limit of 100000"),
])
def test_a_request_over_a_limit_is_refused_at_once_naming_the_keyword_and_the_limit(params, message):
    started = time.monotonic()
    with pytest.raises(PatternError, match=re.escape(message)):
        constraints().prepare(SamplingParams(**params))
    assert time.monotonic() - started < 5, "a refusal by size comes before the expensive work"


@pytest.mark.task("8.6")
def test_the_operator_changes_a_limit():
    relaxed, strict = constraints(max_items=2000), constraints(max_items=2)
    schema = SamplingParams(json_schema={"type": "array", "items": {"type": "boolean"}, "maxItems": 300})
    relaxed.prepare(schema)
    relaxed.release(schema)
    with pytest.raises(PatternError, match=re.escape("maxItems 300 is over the limit of 2 (structured limit max_items)")):
        strict.prepare(schema)
    with pytest.raises(ValueError, match="unknown structured limit 'max_itemz'"):
        Limits.parse({"max_itemz": 3})


@pytest.mark.task("8.6")
def test_a_compile_past_its_deadline_is_refused_naming_the_budget():
    started = time.monotonic()
    with pytest.raises(PatternError, match=re.escape("compile budget of 0.05 s (compile_seconds)")):
        constraints(compile_seconds=0.05).prepare(SLOW)
    assert time.monotonic() - started < 2, "the deadline is checked inside the compile's loops"


@pytest.mark.task("8.6")
def test_a_cancelled_compile_stops_soon_and_holds_nothing():
    c, cancel = constraints(), threading.Event()
    threading.Timer(0.05, cancel.set).start()
    started = time.monotonic()
    with pytest.raises(CompileCancelled):
        c.prepare(SLOW, cancel)
    assert time.monotonic() - started < 1.5, "cancellation is checked inside the compile's loops"
    assert not issubclass(CompileCancelled, PatternError), "a cancelled compile is not the client's mistake (no 400)"
    assert c.stats()["indexes_in_use"] == 0


@pytest.mark.task("8.6")
def test_prepare_holds_the_index_for_start_and_release_gives_it_back():
    c = constraints()
    params = SamplingParams(regex="[a-c]{2}x")
    c.prepare(params)
    stats = c.stats()
    assert (stats["indexes"], stats["indexes_in_use"], stats["compiles"]) == (1, 1, 1)
    c.start(["r1", "r2"], params)
    assert c.stats()["compiles"] == 1, "start uses the prepared index: it never compiles again"
    assert c.mask("r1")[ord("a")] and not c.mask("r1")[ord("x")]
    c.forget("r1")
    assert c.stats()["indexes_in_use"] == 1, "r2 still uses the index"
    c.forget("r2")
    assert c.stats()["indexes_in_use"] == 0
    c.prepare(params)
    assert c.stats()["indexes_in_use"] == 1
    c.release(params)
    assert c.stats()["indexes_in_use"] == 0
    c.prepare(SamplingParams())  # unconstrained: nothing to do
    assert c.stats()["compiles"] == 1


def decode_all(c: Constraints, rid: str, text: str) -> None:
    """Follow a constrained request through its whole pattern, one byte token per step (masks built on the way)."""
    for byte in text.encode():
        assert c.mask(rid)[byte], f"{byte!r} must be allowed here"
        c.guides[rid].advance(byte)


@pytest.mark.task("8.6")
def test_index_memory_is_counted_in_bytes_and_kept_within_the_budget_when_unused():
    """Three distinct long consts decoded over a 49,152-token vocabulary: each state keeps one bit per token."""
    size, budget = 49_152, 4 * 2**20
    c = constraints(size=size, cache_bytes=budget)
    texts = [f"{i}" + "abcdefghij" * 60 for i in range(3)]
    for i, text in enumerate(texts):
        params = SamplingParams(json_schema={"const": text})
        c.start([f"r{i}"], params)
        decode_all(c, f"r{i}", f'"{text}"')
        during = c.stats()["index_cache_bytes"]
        per_state = during / (len(text) + 3)
        assert per_state < size / 8 + 256 * 8 + 64, f"{per_state:.0f} bytes a state: more than a bit a token + the DFA row"
        c.forget(f"r{i}")
        assert c.stats()["index_cache_bytes"] <= budget, c.stats()
    assert c.stats()["evictions"] >= 1 and c.stats()["indexes_in_use"] == 0


@pytest.mark.task("8.6")
def test_an_index_in_use_is_never_evicted():
    c = constraints(size=49_152, cache_bytes=1)  # every unused index is over the budget at once
    params = SamplingParams(json_schema={"const": "abc" * 100})
    c.start(["r"], params)
    c.prepare(SamplingParams(regex="x+"))  # another compile: the cache evicts what it may
    decode_all(c, "r", '"' + "abc" * 100 + '"')
    assert c.guides["r"].finished
    assert c.stats()["indexes"] == 2
    c.forget("r")
    c.release(SamplingParams(regex="x+"))
    assert c.stats()["indexes"] == 0 and c.stats()["index_cache_bytes"] == 0


@pytest.mark.task("8.6")
def test_the_cache_is_safe_under_threads():
    c = constraints()
    patterns = [SamplingParams(regex=f"[a-c]{{{n}}}x") for n in range(1, 9)]
    errors = []

    def worker(k: int) -> None:
        try:
            for j in range(20):
                params = patterns[(k + j) % len(patterns)]
                c.prepare(params)
                c.release(params)
        except Exception as exc:  # noqa: BLE001 - collected and reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors and c.stats()["indexes_in_use"] == 0, errors
