"""Tasks 5.9 and 5.11: the step packed into one batch, and the engine step that drives it.

Task 5.9's tests drive the model runner with the scheduler by hand (a
greedy loop written here), so they do not need Task 5.11; Task 5.11's tests
go through `LLMEngine.step`. The oracle is transformers' greedy generate.
"""

import pytest
from tiny_models import save_tiny_model, transformers_greedy

from miniyaie.engine import EngineConfig, LLMEngine
from miniyaie.engine.sampler import SamplingRow
from miniyaie.engine.sampling_params import SamplingParams
from miniyaie.scheduler import Request, ScheduledChunk, SchedulerOutput

MAX_TOKENS = 5


def greedy() -> SamplingParams:
    """Made when a test runs, not at import: until Task 5.1 is written no SamplingParams can be made."""
    return SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)
PROMPTS = [[3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46], [26, 43, 38, 32, 79], [50, 28, 84, 19, 71, 69, 39, 93, 75]]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-qwen2-step")
    hf_model = save_tiny_model("qwen2", path)
    from miniyaie.model import load_model

    return load_model(path), hf_model


@pytest.fixture(scope="module")
def expected(tiny):
    return [transformers_greedy(tiny[1], p, MAX_TOKENS) for p in PROMPTS]


def engine_for(model, **config) -> LLMEngine:
    settings = dict(block_size=4, num_blocks=64, max_num_batched_tokens=8, enable_prefix_caching=False)
    return LLMEngine(model, EngineConfig(**{**settings, **config}))


def events_until_idle(engine: LLMEngine, max_steps: int = 200) -> list:
    """Every event of the engine's steps until it has nothing left (a step that never ends them fails here)."""
    events = []
    for _ in range(max_steps):
        if not engine.has_unfinished():
            return events
        events += engine.step()
    raise AssertionError(f"the requests did not finish in {max_steps} steps")


def greedy_row(request: Request) -> SamplingRow:
    return SamplingRow(greedy(), request.prompt_token_ids, request.output_token_ids)


def run_by_hand(engine: LLMEngine, prompts, record=None, max_steps=200) -> dict[str, list[int]]:
    """A greedy loop over the scheduler and the model runner alone (no LLMEngine.step)."""
    requests = [Request(f"r{i}", list(p), MAX_TOKENS, ignore_eos=True) for i, p in enumerate(prompts)]
    for r in requests:
        engine.scheduler.add_request(r)
    for _ in range(max_steps):
        if not engine.scheduler.has_unfinished():
            break
        out = engine.scheduler.schedule()
        rows = {c.request.request_id: greedy_row(c.request) for c in out.chunks}
        sampled = engine.runner.run(out, rows)
        if record is not None:
            record(out, sampled)
        engine.scheduler.update(out, {rid: s.token_id for rid, s in sampled.items()})
    else:
        raise AssertionError(f"the requests did not finish in {max_steps} steps")
    return {r.request_id: r.output_token_ids for r in requests}


@pytest.mark.task("5.9")
def test_chunks_are_packed_in_order_at_their_own_positions(tiny, expected):
    model, _ = tiny
    engine = engine_for(model)
    packed = []
    prepare = engine.runner.prepare

    def recording_prepare(out):
        ids, positions, meta = prepare(out)
        packed.append(([(c.request, c.start, c.num_tokens) for c in out.chunks], ids.tolist(), positions.tolist()))
        return ids, positions, meta

    engine.runner.prepare = recording_prepare
    outputs = run_by_hand(engine, PROMPTS)
    for chunks, ids, positions in packed:
        assert len(ids) == len(positions) == sum(n for _, _, n in chunks), "one id and one position per scheduled token"
        row = 0
        for request, start, n in chunks:
            sequence = request.all_token_ids
            assert positions[row : row + n] == list(range(start, start + n)), (
                f"{request.request_id}'s chunk starting at token {start} got positions {positions[row:row + n]}: "
                "a chunk continues its request, its positions start at chunk.start"
            )
            assert ids[row : row + n] == sequence[start : start + n], "a chunk's ids are its request's tokens from chunk.start on"
            row += n
    assert any(start > 0 for chunks, _, _ in packed for _, start, _ in chunks), "chunked prefill was exercised"
    assert [outputs[f"r{i}"] for i in range(len(PROMPTS))] == expected, "greedy output differs from transformers"


@pytest.mark.task("5.9")
def test_only_chunks_that_reach_their_end_sample(tiny):
    model, _ = tiny
    engine = engine_for(model)

    def check(out, sampled):
        reach_end = {c.request.request_id for c in out.chunks if c.start + c.num_tokens == c.request.num_tokens}
        assert set(sampled) == reach_end, (
            f"sampled {sorted(set(sampled))} but only {sorted(reach_end)} reached the end of their known tokens: "
            "a chunk in the middle of a prompt must not sample"
        )

    run_by_hand(engine, PROMPTS, record=check)


@pytest.mark.task("5.9")
def test_the_lm_head_runs_only_on_the_rows_that_sample(tiny, monkeypatch):
    model, _ = tiny
    engine = engine_for(model)
    head_rows, sampled_counts = [], []
    compute_logits = engine.model.compute_logits

    def counting(hidden):
        head_rows.append(hidden.shape[0])
        return compute_logits(hidden)

    monkeypatch.setattr(engine.model, "compute_logits", counting)
    run_by_hand(engine, PROMPTS, record=lambda out, sampled: sampled_counts.append(len(sampled)))
    assert sum(head_rows) == sum(sampled_counts), (
        f"the LM head ran on {sum(head_rows)} rows for {sum(sampled_counts)} sampled tokens: a vocabulary-wide "
        "matmul for a prompt token nobody samples is wasted; take the logits of the sampling rows only")
    assert 0 in sampled_counts, "a step in which no chunk samples was meant to be exercised (chunked prefill)"


@pytest.mark.task("5.9")
def test_a_forked_completion_reads_its_copy_of_the_shared_block(tiny, expected):
    """Copy-on-write: the completion's first write lands in a private copy, which must hold the prompt's K/V."""
    model, _ = tiny
    engine = engine_for(model)
    prompt = PROMPTS[0]  # 11 tokens: the prompt ends inside its third block of 4
    parent = Request("parent", list(prompt), MAX_TOKENS, ignore_eos=True)
    engine.scheduler.add_request(parent)
    while not parent.output_token_ids:  # the prompt's prefill, chunk by chunk, up to its first token
        out = engine.scheduler.schedule()
        sampled = engine.runner.run(out, {c.request.request_id: greedy_row(c.request) for c in out.chunks})
        engine.scheduler.update(out, {rid: s.token_id for rid, s in sampled.items()})
    child = Request("child", list(prompt), MAX_TOKENS, ignore_eos=True)
    child.num_computed_tokens = len(prompt)
    engine.memory.fork("parent", "child")
    engine.scheduler.add_forked(child)
    engine.scheduler.update(SchedulerOutput([ScheduledChunk(child, len(prompt), 0)], []), {"child": parent.output_token_ids[0]})
    while engine.scheduler.has_unfinished():
        out = engine.scheduler.schedule()
        sampled = engine.runner.run(out, {c.request.request_id: greedy_row(c.request) for c in out.chunks})
        engine.scheduler.update(out, {rid: s.token_id for rid, s in sampled.items()})
    assert parent.output_token_ids == expected[0]
    assert child.output_token_ids == expected[0], (
        "the forked completion's tokens differ from its parent's (greedy): its private copy of the shared "
        "block did not get the prompt's K/V before the step wrote into it (copy the queued blocks in prepare)"
    )


@pytest.mark.task("5.11")
def test_the_step_generates_what_transformers_generates(tiny, expected):
    model, _ = tiny
    engine = engine_for(model, enable_prefix_caching=True)
    outputs = engine.generate(PROMPTS + PROMPTS[:1], greedy())  # the repeat finds its prompt in the prefix cache
    assert [o.token_ids for o in outputs] == expected + expected[:1], "greedy output differs from transformers"
    assert all(o.finish_reason == "length" for o in outputs)
    assert engine.memory.num_free_blocks + engine.memory.num_used_blocks == engine.memory.num_blocks
    assert engine.num_request_blocks == 0, f"{engine.num_request_blocks} blocks still held after every request finished"


@pytest.mark.task("5.11")
def test_n_completions_fork_after_the_prompt_and_each_gets_every_token(tiny, expected):
    model, _ = tiny
    engine = engine_for(model)
    rid = engine.add_request(PROMPTS[0], SamplingParams(n=3, max_tokens=5, ignore_eos=True))
    outputs: dict[str, list[int]] = {}
    finished: dict[str, str] = {}
    for _ in range(200):
        if not engine.has_unfinished():
            break
        for event in engine.step():
            outputs.setdefault(event.request_id, []).append(event.token_id)
            if event.finish_reason:
                finished[event.request_id] = event.finish_reason
    assert sorted(outputs) == sorted([rid, f"{rid}#1", f"{rid}#2"]), f"completions seen: {sorted(outputs)}"
    for name, tokens in outputs.items():
        assert tokens == expected[0], f"{name} got {tokens}; a greedy completion must equal transformers {expected[0]}"
    assert finished == dict.fromkeys(outputs, "length")
    assert engine.counters["forked_requests"] == 2
    assert engine.num_request_blocks == 0, "blocks still held after the completions finished"
    for name in (f"{rid}#2", f"{rid}#1", rid):  # a finished request's ids are free again, its own last
        assert engine.add_request([1, 2], SamplingParams(max_tokens=1), request_id=name) == name


@pytest.mark.task("5.11")
def test_forked_completions_report_the_prompt_tokens_their_request_found_cached(tiny, expected):
    model, _ = tiny
    engine = engine_for(model, enable_prefix_caching=True)
    engine.generate([PROMPTS[0]], greedy())  # leaves the prompt's full blocks in the radix tree
    rid = engine.add_request(PROMPTS[0], SamplingParams(n=3, max_tokens=3, ignore_eos=True))
    cached: dict[str, set[int]] = {}
    for _ in range(200):
        if not engine.has_unfinished():
            break
        for event in engine.step():
            cached.setdefault(event.request_id, set()).add(event.cached_tokens)
    assert cached[rid] == {8}, f"the request found 8 prompt tokens (2 full blocks) cached, its events say {cached[rid]}"
    for child in (f"{rid}#1", f"{rid}#2"):
        assert cached.get(child) == {8}, (
            f"{child} shares its request's prompt, cached tokens included: its events say {cached.get(child)}, "
            "expected {8} (a fork carries the parent's cached count)")
    assert engine.num_request_blocks == 0


@pytest.mark.task("5.11")
def test_a_stop_token_ends_the_request_even_with_ignore_eos(tiny, expected):
    model, _ = tiny
    engine = engine_for(model)
    stop = expected[1][2]
    events = []
    engine.add_request(PROMPTS[1], SamplingParams(max_tokens=5, ignore_eos=True, stop_token_ids=[stop]))
    for _ in range(100):
        if not engine.has_unfinished():
            break
        events += engine.step()
    tokens = [e.token_id for e in events]
    assert tokens == expected[1][: expected[1].index(stop) + 1], "generation must end at the first stop token, included"
    assert events[-1].finish_reason == "stop", f"finish reason {events[-1].finish_reason!r}; a stop token ends with 'stop'"
    assert engine.num_request_blocks == 0, "the stopped request's blocks were not returned"


@pytest.mark.task("5.11")
def test_ignore_eos_runs_past_the_eos_token_and_without_it_eos_ends_the_request(tiny, expected):
    """EOS is the scheduler's rule and ignore_eos turns it off; only a request's own stop_token_ids end it regardless."""
    model, _ = tiny
    eos = expected[1][1]
    engine = engine_for(model)
    (ignoring,) = engine.generate([PROMPTS[1]], SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True), eos_token_ids=[eos])
    assert ignoring.token_ids == expected[1], (
        f"with ignore_eos the request must run to max_tokens through its EOS token {eos}; it gave {ignoring.token_ids} "
        "(check the request's own stop_token_ids after the update, not its EOS tokens)")
    assert ignoring.finish_reason == "length"
    (stopping,) = engine.generate([PROMPTS[1]], SamplingParams(max_tokens=MAX_TOKENS), eos_token_ids=[eos])
    upto = expected[1].index(eos) + 1
    assert stopping.token_ids == expected[1][:upto] and stopping.finish_reason == "stop", (
        f"without ignore_eos, EOS {eos} ends the request after it: got {stopping.token_ids} ({stopping.finish_reason})")
    assert engine.num_request_blocks == 0


@pytest.mark.task("5.11")
def test_completions_of_a_request_that_finishes_on_its_first_token(tiny, expected):
    """n=2, max_tokens=1: the parent finishes in the very step its completion is forked from it."""
    model, _ = tiny
    engine = engine_for(model)
    rid = engine.add_request(PROMPTS[0], SamplingParams(n=2, max_tokens=1, ignore_eos=True))
    events = events_until_idle(engine)
    got = {e.request_id: (e.token_id, e.finish_reason) for e in events}
    first = expected[0][0]
    assert got == {rid: (first, "length"), f"{rid}#1": (first, "length")}, (
        f"each completion gets one token and finishes: {got} (fork the completion before the update, which "
        "may finish its parent and free the blocks the completion shares)")
    assert engine.num_request_blocks == 0


@pytest.mark.task("5.11")
def test_a_completion_aborted_before_its_fork_is_never_forked_and_its_id_serves_a_new_request(tiny):
    model, _ = tiny
    engine = engine_for(model)
    engine.add_request(PROMPTS[0], SamplingParams(n=3, max_tokens=4, ignore_eos=True), request_id="g")
    assert engine.abort("g#1")  # before the first step: g#1 was never forked
    engine.add_request(PROMPTS[1], SamplingParams(max_tokens=4, ignore_eos=True), request_id="g#1")  # a new request
    finishes, tokens = {}, {}
    for event in events_until_idle(engine):
        tokens.setdefault(event.request_id, []).append(event.token_id)
        if event.finish_reason:
            finishes[event.request_id] = event.finish_reason
    assert finishes == {"g": "length", "g#2": "length", "g#1": "length"}
    assert len(tokens["g#1"]) == 4, (
        "the new g#1 also got tokens forked from g: the aborted completion g#1 was still listed among g's "
        "completions to fork (forgetting a completion, Task 5.10, takes it off that list)")
    assert engine.num_request_blocks == 0


@pytest.mark.task("5.11")
def test_generate_answers_each_prompt_in_order_with_its_first_completion(tiny, expected):
    model, _ = tiny
    engine = engine_for(model)
    outputs = engine.generate(PROMPTS, SamplingParams(n=2, max_tokens=5, ignore_eos=True))
    assert [o.token_ids for o in outputs] == expected, "one Generation per prompt, in prompt order (completion 0)"
    assert all(o.finish_reason == "length" for o in outputs)
    assert engine.stats["forked_requests"] == len(PROMPTS), "the other completions ran too"
    assert engine.num_request_blocks == 0


@pytest.mark.task("5.11")
def test_generate_raises_the_error_of_a_failed_request(tiny, monkeypatch):
    from miniyaie.engine.outputs import RequestEvent

    model, _ = tiny
    engine = engine_for(model)
    step = engine.step

    def failing_step():  # the step reports a request's own fault, as chapter 8's guides can
        events = step()
        return [RequestEvent(e.request_id, e.token_id, None, error=RuntimeError("its guide failed")) for e in events[:1]] + events[1:]

    monkeypatch.setattr(engine, "step", failing_step)
    with pytest.raises(RuntimeError, match="its guide failed"):
        engine.generate(PROMPTS[:1], greedy())
