"""Task 1.3: recording a step's results (Scheduler.update), with only admission (Tasks 1.1-1.2) behind it.

The first step of a fresh scheduler only admits; later steps are built by
hand as the scheduler would build them (a decode chunk of one token), so
these tests need no running-request scheduling (Task 1.4).
"""

import itertools

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from miniyaie.scheduler import (
    FinishReason, Request, RequestStatus, ScheduledChunk, Scheduler, SchedulerConfig, SchedulerOutput, TokenCountingMemory,
)

_ids = itertools.count()
EOS = 0


def request(prompt_len: int, max_tokens: int, **kwargs) -> Request:
    return Request(f"u{next(_ids)}", [5 + i % 7 for i in range(prompt_len)], max_tokens, eos_token_ids=[EOS], **kwargs)


def admitted(*requests: Request, budget: int = 64) -> tuple[Scheduler, SchedulerOutput]:
    s = Scheduler(SchedulerConfig(max_num_batched_tokens=budget, max_num_seqs=8), TokenCountingMemory(1000))
    for r in requests:
        s.add_request(r)
    return s, s.schedule()


def decode_step(*requests: Request) -> SchedulerOutput:
    """The step that feeds each request its last sampled token."""
    return SchedulerOutput([ScheduledChunk(r, r.num_computed_tokens, 1) for r in requests])


@pytest.mark.task("1.3")
@given(prompt_len=st.integers(1, 30), budget=st.integers(1, 40))
@example(prompt_len=10, budget=10)  # the chunk ends exactly on the prompt's last token
@example(prompt_len=10, budget=3)  # a chunk in the middle of the prompt
def test_a_chunk_advances_its_request_and_only_the_last_one_samples(prompt_len, budget):
    r = request(prompt_len, max_tokens=5, ignore_eos=True)
    s, out = admitted(r, budget=budget)
    (chunk,) = out.chunks
    finished = s.update(out, {r.request_id: 3} if chunk.samples_next_token else {})
    assert finished == []
    assert r.num_computed_tokens == chunk.num_tokens, "a chunk's tokens are computed once the step ran"
    if chunk.num_tokens == prompt_len:
        assert r.output_token_ids == [3], "the chunk reached the last prompt token: the sampled token is appended"
    else:
        assert r.output_token_ids == [], "a chunk in the middle of the prompt samples nothing"
    assert r.status is RequestStatus.RUNNING and r in s.running


@pytest.mark.task("1.3")
@pytest.mark.parametrize("ignore_eos", [False, True])
def test_an_end_of_sequence_token_stops_a_request_unless_ignored(ignore_eos):
    r, other = request(4, max_tokens=5, ignore_eos=ignore_eos), request(3, max_tokens=5)
    s, out = admitted(r, other)
    finished = s.update(out, {r.request_id: EOS, other.request_id: 9})
    if ignore_eos:
        assert finished == [] and r in s.running, "with ignore_eos an end-of-sequence token is an ordinary token"
        return
    assert finished == [r], "update returns the requests that finished in this step"
    assert r.finish_reason is FinishReason.STOP and r.status is RequestStatus.FINISHED
    assert r not in s.running and other in s.running, "a finished request leaves running; the others stay"
    assert r.output_token_ids == [EOS], "the end-of-sequence token is part of the output"
    assert s.memory.num_used_tokens == 3, "the finished request's memory is freed (the other holds its 3 tokens)"
    s.add_request(Request(r.request_id, [1], 1))  # a finished request's id is free again


@pytest.mark.task("1.3")
def test_any_of_a_requests_end_of_sequence_ids_stops_it():
    # Chat models often have several (Llama 3: <|end_of_text|> and <|eot_id|>): each of them ends the text.
    first, second = (Request(f"u{next(_ids)}", [5, 6, 7], 5, eos_token_ids=[7, 9]) for _ in range(2))
    s, out = admitted(first, second)
    finished = s.update(out, {first.request_id: 9, second.request_id: 7})
    assert finished == [first, second] and first.finish_reason is FinishReason.STOP, (
        f"Task 1.3: requests with end-of-sequence ids [7, 9] sampled 9 and 7 and finished {[r.request_id for r in finished]} "
        f"(expected both, with STOP): any of a request's eos_token_ids stops it, not only the first"
    )


@pytest.mark.task("1.3")
@given(max_tokens=st.integers(1, 6), prompt_len=st.integers(1, 8))
@example(max_tokens=1, prompt_len=3)  # the prefill's token is the last one
def test_a_request_stops_after_max_tokens(max_tokens, prompt_len):
    r = request(prompt_len, max_tokens=max_tokens)
    s, out = admitted(r)
    finished = s.update(out, {r.request_id: 9})
    for _ in range(max_tokens - 1):
        assert finished == [], f"only {len(r.output_token_ids)} of {max_tokens} tokens so far: still running"
        assert r.num_computed_tokens == r.num_tokens - 1, "every token but the one sampled last has its K/V cached"
        finished = s.update(decode_step(r), {r.request_id: 9})
    assert finished == [r] and r.finish_reason is FinishReason.LENGTH, f"max_tokens={max_tokens} reached: LENGTH"
    assert len(r.output_token_ids) == max_tokens
    assert r not in s.running, "Task 1.3: the finished request is still in running: a finished request leaves running"
    assert not s.has_unfinished(), (
        f"Task 1.3: has_unfinished() is True after the only request finished (waiting {len(s.waiting)}, running "
        f"{len(s.running)}): a finished request is in neither queue"
    )
    assert s.memory.num_used_tokens == 0, (
        f"Task 1.3: {s.memory.num_used_tokens} tokens still held after the request finished: _finish frees its memory"
    )


@pytest.mark.task("1.3")
@pytest.mark.parametrize("max_tokens", [1, 2])
def test_an_end_of_sequence_token_that_is_also_the_last_allowed_one_is_a_stop(max_tokens):
    r = request(3, max_tokens=max_tokens)
    s, out = admitted(r)
    finished = s.update(out, {r.request_id: 9} if max_tokens > 1 else {r.request_id: EOS})
    if max_tokens > 1:
        finished = s.update(decode_step(r), {r.request_id: EOS})
    assert finished == [r] and len(r.output_token_ids) == max_tokens
    assert r.finish_reason is FinishReason.STOP, (
        f"the model ended the text with its end-of-sequence token at the last allowed position: finish_reason "
        f"{r.finish_reason}, expected STOP (an end-of-sequence token is checked before max_tokens)"
    )


@pytest.mark.task("1.3")
def test_a_finished_request_gives_back_its_memory_and_its_id():
    first, second = request(3, max_tokens=1), request(2, max_tokens=1)
    s, out = admitted(first, second)
    assert s.update(out, {first.request_id: 9, second.request_id: 9}) == [first, second]
    assert s.memory.num_used_tokens == 0, (
        f"the finished request still holds {s.memory.num_used_tokens} tokens of memory: a finished request holds none"
    )
    assert not s.requests, (
        f"Task 1.3: after both requests finished, scheduler.requests still holds {sorted(s.requests)}: a finished "
        "request is no longer known by its id (_finish forgets it), or a server would keep every request it ever served"
    )
    again = Request(first.request_id, [5, 6, 7], 2, eos_token_ids=[EOS])
    try:
        s.add_request(again)
    except ValueError as error:
        pytest.fail(
            f"adding a new request under the id of one that finished raised {error!r}: a finished request's id is "
            "free again (the scheduler knows unfinished requests only)"
        )
    out = s.schedule()
    assert [c.request for c in out.chunks] == [again], "the request that reuses a finished one's id is admitted"
    try:
        s.add_forked(Request(second.request_id, [5, 6], 2, eos_token_ids=[EOS]))
    except ValueError as error:
        pytest.fail(f"Task 1.3: add_forked refused the id of a request that finished ({error!r}): its id is free again")


@pytest.mark.task("1.3")
def test_requests_finishing_together_come_back_in_chunk_order():
    a, b, c = request(2, max_tokens=1), request(2, max_tokens=3), request(2, max_tokens=1)
    s, out = admitted(a, b, c)
    finished = s.update(out, {a.request_id: 9, b.request_id: EOS, c.request_id: 9})
    assert finished == [a, b, c], "b stopped at EOS, a and c at max_tokens: all three, in the step's order"
    assert [r.finish_reason for r in finished] == [FinishReason.LENGTH, FinishReason.STOP, FinishReason.LENGTH]


@pytest.mark.task("1.3")
def test_a_chunk_in_the_middle_of_a_prompt_does_not_stop_the_others():
    short, long = request(5, max_tokens=4), request(30, max_tokens=4)
    s, out = admitted(short, long, budget=25)  # short's whole prompt, then 20 of long's 30
    s.update(out, {short.request_id: 9})
    step = SchedulerOutput([ScheduledChunk(long, 20, 5), ScheduledChunk(short, 5, 1)])  # long: still mid-prompt
    s.update(step, {short.request_id: 8})
    assert (long.num_computed_tokens, long.output_token_ids) == (25, []), "a mid-prompt chunk samples nothing"
    assert (short.num_computed_tokens, short.output_token_ids) == (6, [9, 8]), (
        "the chunks after a mid-prompt chunk are recorded too"
    )


@pytest.mark.task("1.3")
@given(prompt_len=st.integers(1, 8), num_output=st.integers(0, 5), start=st.integers(0, 12), num_tokens=st.integers(1, 13))
@example(prompt_len=4, num_output=3, start=0, num_tokens=5)  # a resumed request's recompute, cut past its prompt
@example(prompt_len=4, num_output=3, start=0, num_tokens=7)  # the whole recompute: it samples
def test_only_a_chunk_that_reaches_the_last_known_token_samples(prompt_len, num_output, start, num_tokens):
    r = request(prompt_len, max_tokens=10)
    r.output_token_ids.extend(range(1, num_output + 1))  # generated before a preemption: recomputed now
    known = r.num_tokens
    if start + num_tokens > known:
        return
    chunk = ScheduledChunk(r, start, num_tokens)
    assert chunk.samples_next_token == (start + num_tokens == known), (
        f"a chunk of tokens [{start}, {start + num_tokens}) of a request that knows {known} tokens "
        f"({prompt_len} prompt + {num_output} output): samples_next_token must be {start + num_tokens == known}; "
        "only the chunk that reaches the last known token (prompt AND output so far) yields a next token"
    )
