"""Task 1.7: a long prefill shares the step with the requests that arrive behind it."""

import itertools

import pytest
from fake_model import Driver, reference_output
from hypothesis import example, given, settings
from hypothesis import strategies as st

from miniyaie.scheduler import Request, Scheduler, SchedulerConfig, TokenCountingMemory

_ids = itertools.count()


def request(prompt_len: int, max_tokens: int = 3) -> Request:
    rid = f"q{next(_ids)}"
    return Request(rid, [(5 * i + len(rid)) % 47 + 1 for i in range(prompt_len)], max_tokens, ignore_eos=True)


def bounded(budget=16, threshold=4, max_long=1, seqs=8, capacity=2000) -> tuple[Scheduler, Driver]:
    config = SchedulerConfig(budget, seqs, long_prefill_token_threshold=threshold, max_long_partial_prefills=max_long)
    s = Scheduler(config, TokenCountingMemory(capacity))
    return s, Driver(s)


def tokens(out) -> dict[str, int]:
    return {c.request.request_id: c.num_tokens for c in out.chunks}


@pytest.mark.task("1.7")
def test_a_long_prompt_alone_still_fills_the_step():
    s, driver = bounded(budget=16, threshold=4)
    long = request(100)
    driver.add(long)
    out = driver.step()
    assert tokens(out) == {long.request_id: 16}, (
        f"a 100-token prompt alone got {tokens(out)} of a 16-token budget: with nobody else to serve, "
        "the budget left after everyone was served goes back to the long prefill (top_up)"
    )
    assert s.stats()["num_long_prefills_held"] == 0, "a long prefill alone is not held back"


@pytest.mark.task("1.7")
def test_a_short_request_is_not_starved_by_a_long_prefill():
    s, driver = bounded(budget=16, threshold=4)
    long, short = request(100), request(3)
    driver.add(long)
    driver.step()
    driver.add(short)
    out = driver.step()
    assert tokens(out) == {long.request_id: 13, short.request_id: 3}, (
        f"step 2 gave {tokens(out)}: a short request arriving behind a long prefill must be admitted at once "
        "(the long one takes at most the threshold, 4, while others want tokens), and the long one then gets "
        "the rest of the budget, 16 - 3"
    )
    assert s.stats()["num_long_prefills_held"] == 1, "the long prefill was held back once to let the short one in"
    driver.run_to_completion(max_steps=50)
    assert short.output_token_ids == reference_output(short.prompt_token_ids, 3)
    assert long.output_token_ids == reference_output(long.prompt_token_ids, 3)


@pytest.mark.task("1.7")
def test_decodes_behind_a_long_prefill_keep_their_pace():
    s, driver = bounded(budget=16, threshold=4)
    decoders = [request(2, max_tokens=30) for _ in range(3)]
    long = request(200)
    driver.add(long)
    driver.step()
    for r in decoders:
        driver.add(r)
    driver.step()
    for _ in range(5):
        out = driver.step()
        got = tokens(out)
        assert all(got.get(r.request_id) == 1 for r in decoders), (
            f"a step gave {got}: every decoding request gets its token each step while a long prefill runs"
        )
        assert got[long.request_id] == 16 - 3, "the long prefill takes the rest of the budget"


@pytest.mark.task("1.7")
@pytest.mark.parametrize("max_long", [1, 2])
def test_at_most_max_long_partial_prefills_long_prompts_take_tokens(max_long):
    s, driver = bounded(budget=40, threshold=4, max_long=max_long)
    longs = [request(100) for _ in range(3)]
    short = request(2)
    for r in longs + [short]:
        driver.add(r)
    out = driver.step()
    got = tokens(out)
    started = [r.request_id for r in longs if r.request_id in got]
    assert started == [r.request_id for r in longs[:max_long]], (
        f"long prompts {started} got tokens in one step; with max_long_partial_prefills={max_long} only the "
        f"first {max_long} may start, the others wait their turn"
    )
    assert got.get(short.request_id) == 2, (
        "a short request behind long prompts held back by max_long_partial_prefills is admitted past them"
    )
    assert out.num_batched_tokens == 40, "the rest of the budget goes back to the long prefills under way"
    assert [r.request_id for r in s.waiting] == [r.request_id for r in longs[max_long:]], (
        "the long prompts held back keep their place in the queue"
    )


class CachedPrefixMemory(TokenCountingMemory):
    """A prefix cache that holds the first 10 tokens of every prompt."""

    def cached_prefix_len(self, request):
        return 10


@pytest.mark.task("1.7")
def test_a_long_prompt_held_back_with_a_cached_prefix_is_left_untouched():
    config = SchedulerConfig(8, 8, long_prefill_token_threshold=4, max_long_partial_prefills=1)
    s = Scheduler(config, CachedPrefixMemory(2000))
    first, second = request(100), request(100)
    s.add_request(first)
    s.add_request(second)
    out = s.schedule()
    assert tokens(out) == {first.request_id: 8}, (
        f"got {tokens(out)}: the first long prompt takes the threshold, then the budget left (top_up); the second is held back"
    )
    assert second in s.waiting and second.num_computed_tokens == 0, (
        f"the long prompt held back (tokens_for granted 0) has num_computed_tokens {second.num_computed_tokens}: "
        "admission set it to its cached prefix to ask tokens_for, and must put it back (a request not admitted is "
        "left exactly as it was)"
    )


class CachedFor(TokenCountingMemory):
    """A prefix cache that holds the first `cached[request_id]` tokens of a prompt."""

    def __init__(self, capacity, cached):
        super().__init__(capacity)
        self.cached = cached

    def cached_prefix_len(self, request):
        return self.cached.get(request.request_id, 0)


@pytest.mark.task("1.7")
def test_a_prompt_whose_rest_after_its_cached_prefix_is_short_is_not_long():
    config = SchedulerConfig(16, 8, long_prefill_token_threshold=8, max_long_partial_prefills=1)
    long, cached = request(60), request(40)
    s = Scheduler(config, CachedFor(1000, {cached.request_id: 36}))
    s.add_request(long)
    s.update(s.schedule(), {})  # the long prompt alone: 16 of its 60 tokens
    s.add_request(cached)
    out = s.schedule()
    got = [(c.request.request_id, c.start, c.num_tokens) for c in out.chunks]
    want = [(long.request_id, 16, 12), (cached.request_id, 36, 4)]
    assert got == want, (
        f"Task 1.7: got (id, start, tokens) {got}, expected {want}: the 40-token prompt has 36 tokens cached, so only "
        "4 are still to compute when admission asks tokens_for about it: it is short (threshold 8) and is admitted "
        "beside the long prefill (8 + the 4 left over). A request is long by what it lacks after the start admission "
        "gives it (set num_computed_tokens to the cached start before asking tokens_for: Task 1.2's _admit_waiting)"
    )


@pytest.mark.task("1.7")
def test_a_long_prompt_still_queued_when_the_budget_runs_out_is_not_counted_as_held():
    s, driver = bounded(budget=4, threshold=4)
    short, long = request(4), request(100)
    driver.add(short)
    driver.add(long)
    out = driver.step()
    assert tokens(out) == {short.request_id: 4}, f"got {tokens(out)}: the short prompt came first and spends the budget"
    assert s.stats()["num_long_prefills_held"] == 0, (
        "admission stops at a spent budget, so the long prompt behind was never offered tokens: it waits its turn "
        "(first come, first served), the bound did not hold it back (tokens_for is asked with a budget of at least 1)"
    )


@pytest.mark.task("1.7")
def test_the_leftover_budget_goes_to_the_oldest_cut_prefill_even_when_it_cannot_finish_it():
    s, driver = bounded(budget=16, threshold=4, max_long=2)
    older, newer, short = request(100), request(100), request(3)
    driver.add(older)
    driver.step()  # alone: 4 from tokens_for, 12 from top_up
    driver.add(newer)
    driver.add(short)
    out = driver.step()
    want = {older.request_id: 4 + 5, newer.request_id: 4, short.request_id: 3}
    assert tokens(out) == want, (
        f"got {tokens(out)}, expected {want}: the two long prefills take the threshold (4 each) and the short request "
        "its 3 tokens; the 5 tokens left go to the cut chunks oldest first (out.chunks order), and a chunk takes "
        "what is left even when that is less than its request lacks (the older one lacks 80 more)"
    )


@pytest.mark.task("1.7")
def test_the_leftover_budget_grows_a_cut_prefill_only_as_far_as_memory_allows():
    # The pool holds 21 slots, exactly what the long prompt may ever need alone; a short request shares it.
    s, driver = bounded(budget=16, threshold=4, capacity=21)
    short, long = request(4, max_tokens=2), request(20, max_tokens=1)
    driver.add(short)
    driver.add(long)
    for step in range(1, 4):
        try:
            out = driver.step()
        except MemoryError as error:
            pytest.fail(
                f"step {step}: {error!r}: top_up may grow a cut chunk only as far as memory.can_allocate allows "
                "(it never preempts, and never allocates what does not fit)"
            )
        assert s.memory.num_used_tokens <= 21, f"step {step}: the memory holds more than its 21 slots"
        assert not out.preempted, f"step {step}: nobody is preempted: the leftover budget is only what memory allows"
    assert tokens(driver.trace.steps[1]) == {short.request_id: 1, long.request_id: 4}, (
        f"step 2: the short request decodes and the long one gets its threshold (4), which fills the 21 slots: the "
        f"leftover budget cannot grow it (memory.can_allocate says no): got {tokens(driver.trace.steps[1])}"
    )
    # A cut chunk the memory cannot grow does not stop the next one: 15 slots hold 4 + 4 and 7 more, so the older
    # prompt's 8 leftover tokens do not fit, and the newer one's 6 do.
    s, driver = bounded(budget=16, threshold=4, max_long=2, capacity=15)
    older, newer = request(14, max_tokens=1), request(10, max_tokens=1)
    driver.add(older)
    driver.add(newer)
    out = driver.step()
    want = {older.request_id: 4, newer.request_id: 10}
    assert tokens(out) == want, (
        f"Task 1.7: got {tokens(out)}, expected {want}: both long prompts take the threshold (4 each), and 7 slots "
        f"are left; the older one cannot grow by the 8 tokens it may take, so it stays as it is, and top_up goes on to "
        f"the next cut chunk: the newer one lacks 6, which fit (a chunk the memory cannot grow does not end the walk)"
    )


@pytest.mark.task("1.7")
def test_a_cut_prefill_the_memory_cannot_grow_by_all_it_may_take_stays_as_it_is():
    # 23 slots: after step 2's threshold the long prompt could grow by 2 more, not by the 11 the budget leaves it.
    s, driver = bounded(budget=16, threshold=4, capacity=23)
    short, long = request(4, max_tokens=2), request(20, max_tokens=1)
    driver.add(short)
    driver.add(long)
    driver.step()
    out = driver.step()
    assert tokens(out) == {short.request_id: 1, long.request_id: 4}, (
        f"step 2 gave {tokens(out)}: the memory can hold 2 more of the long prompt's tokens but not all the 11 the "
        "budget leaves it: top_up grows a chunk by all it may take or leaves it as it is (never by a part)"
    )


@pytest.mark.ungraded
def test_the_threshold_zero_turns_the_bound_off():
    config = SchedulerConfig(16, 8)
    assert config.long_prefill_token_threshold == 0, "chapter 1's scheduler has no bound unless asked"
    with pytest.raises(ValueError, match="long_prefill_token_threshold"):
        SchedulerConfig(16, 8, long_prefill_token_threshold=-1)
    with pytest.raises(ValueError, match="max_long_partial_prefills"):
        SchedulerConfig(16, 8, long_prefill_token_threshold=4, max_long_partial_prefills=0)


arrivals = st.lists(
    st.tuples(st.integers(0, 8), st.integers(1, 60), st.integers(1, 5)),  # arrival step, prompt, max tokens
    min_size=1,
    max_size=8,
)


@pytest.mark.task("1.7")
@settings(max_examples=60, deadline=None)
@given(
    budget=st.integers(1, 24), threshold=st.integers(1, 12), max_long=st.integers(1, 3), requests=arrivals,
)
@example(budget=16, threshold=4, max_long=1, requests=[(0, 60, 2), (1, 3, 2)])  # a short one behind a long one
@example(budget=12, threshold=4, max_long=1, requests=[(0, 40, 1), (0, 40, 1), (0, 40, 1), (1, 2, 3)])  # behind three
@example(budget=4, threshold=4, max_long=1, requests=[(0, 30, 1), (0, 2, 1)])  # threshold = budget
@example(budget=1, threshold=1, max_long=2, requests=[(0, 5, 2), (0, 5, 2)])  # budget 1
def test_while_a_short_request_waits_no_long_prefill_takes_more_than_the_threshold(budget, threshold, max_long, requests):
    """Ample memory and seats: only the budget and the bound decide. After every step:
    - while a short request (threshold tokens or fewer to compute) is left wanting, no long request got
      more than threshold tokens, and at most max_long long requests got tokens;
    - the budget is used up unless every request got all it lacked (nothing is wasted);
    and every request ends with the output it would have alone."""
    s, driver = bounded(budget=budget, threshold=threshold, max_long=max_long, seqs=len(requests), capacity=10_000)
    made = []
    for step in range(3000):
        for i, (arrival, prompt_len, max_tokens) in enumerate(requests):
            if arrival == step:
                made.append(request(prompt_len, max_tokens))
                driver.add(made[-1])
        if not s.has_unfinished():
            if step > max(a for a, _, _ in requests):
                break
            continue
        lacks = {r.request_id: r.num_tokens - r.num_computed_tokens for r in list(s.running) + list(s.waiting)}
        out = driver.step()
        got = tokens(out)
        long = {rid for rid, n in lacks.items() if n > threshold}
        short_left_wanting = [rid for rid, n in lacks.items() if rid not in long and got.get(rid, 0) < n]
        over = {rid: got[rid] for rid in long & got.keys() if got[rid] > threshold}
        if short_left_wanting:
            assert not over, (
                f"long prefills {over} took more than the threshold ({threshold}) of a {budget}-token step "
                f"while {short_left_wanting} were left wanting tokens"
            )
            assert len(long & got.keys()) <= max_long, (
                f"{sorted(long & got.keys())} long requests got tokens in a step where {short_left_wanting} were "
                f"left wanting; max_long_partial_prefills is {max_long}"
            )
        if out.num_batched_tokens < budget:
            starved = [rid for rid in lacks if got.get(rid, 0) < lacks[rid]]
            assert not starved, (
                f"{starved} were left wanting while {budget - out.num_batched_tokens} tokens of the budget went unused "
                "(what nobody else takes goes to the long prefills cut, then to the long prompts held back)"
            )
    else:
        pytest.fail("the workload did not finish in 3000 steps")
    for r in made:
        assert r.output_token_ids == reference_output(r.prompt_token_ids, r.max_tokens)
    assert s.memory.num_used_tokens == 0, "all memory comes back"
