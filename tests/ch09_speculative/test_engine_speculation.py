"""Task 9.3, speculative decoding in the engine: the same tokens, fewer steps, and nothing rejected kept.

The oracle is the engine without speculation (itself equal to transformers' greedy generate, which the
first test checks again). The tiny random model's greedy outputs fall into loops on some prompts, so the
n-gram proposer's drafts are sometimes accepted and sometimes rejected: both paths run.
"""

import random
import sys
from pathlib import Path

import pytest
from token_diff import first_difference
from hypothesis import assume, example, given
from hypothesis import strategies as st

sys.path.append(str(Path(__file__).resolve().parents[1] / "ch00_model"))
from tiny_models import save_tiny_model, transformers_greedy  # noqa: E402

from miniyaie.engine import EngineConfig, LLMEngine  # noqa: E402
from miniyaie.engine.sampling_params import SamplingParams  # noqa: E402
from miniyaie.paged import blocks_needed  # noqa: E402
from miniyaie.scheduler import Request  # noqa: E402
from miniyaie.speculative.step import PromptLookup, Speculation  # noqa: E402

RNG = random.Random(0)
PROMPTS = [[RNG.randrange(320) for _ in range(RNG.randrange(3, 30))] for _ in range(6)] + [[5, 6, 7, 8] * 6]
MAX_TOKENS = 40


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-llama-spec")
    hf_model = save_tiny_model("llama", path)
    from miniyaie.model import load_model

    return load_model(path), hf_model


def engine(model, speculative: bool, **config) -> LLMEngine:
    settings = dict(block_size=4, num_blocks=200, max_num_batched_tokens=32)
    if speculative:
        settings.update(speculative="ngram", num_speculative_tokens=4, max_speculative_step_tokens=64)
    return LLMEngine(model, EngineConfig(**{**settings, **config}))


def greedy(**overrides) -> SamplingParams:
    return SamplingParams(**{"max_tokens": MAX_TOKENS, "ignore_eos": True, **overrides})


def tokens(llm: LLMEngine, prompts, params) -> list[list[int]]:
    return [g.token_ids for g in llm.generate(prompts, params)]


def cached_paths(memory) -> list[list[int]]:
    """Every root-to-leaf token path of the radix tree."""
    paths = []
    for node in memory.cache._nodes():
        if node.is_leaf and node is not memory.cache.root:
            path, walk = [], node
            while walk is not None:
                path[:0] = walk.key
                walk = walk.parent
            paths.append(path)
    return paths


@pytest.mark.parametrize("config", [
    dict(),
    dict(enable_prefix_caching=False),
    dict(block_size=1),
    dict(block_size=16, max_num_batched_tokens=8),  # the budget cuts drafts short
    dict(num_blocks=24, max_num_batched_tokens=16),  # a small pool: requests are preempted mid-run
], ids=["radix", "paged", "block-1", "tight-budget", "preemption"])
@pytest.mark.task("9.3")
def test_greedy_output_with_speculation_equals_greedy_output_without_it(tiny, config):
    model, hf_model = tiny
    plain = tokens(engine(model, False, **config), PROMPTS, greedy())
    assert plain == [transformers_greedy(hf_model, p, MAX_TOKENS) for p in PROMPTS], "the plain engine is the oracle"
    llm = engine(model, True, **config)
    spec = tokens(llm, PROMPTS, greedy())
    for i, (want, got) in enumerate(zip(plain, spec)):
        assert got == want, f"prompt {i}: with speculation {got}, without {want}"
    c = llm.counters
    assert c["draft_tokens"] > c["accepted_draft_tokens"] > 0, f"both paths must run (accepted and rejected): {c}"
    assert llm.num_request_blocks == 0, "every request's blocks came back"
    if config.get("num_blocks") == 24:
        assert llm.scheduler.num_preemptions > 0, "the small pool was meant to preempt"
    if hasattr(llm.memory, "check_integrity"):
        llm.memory.check_integrity()


@pytest.mark.task("9.3")
def test_speculation_takes_fewer_steps_where_drafts_are_accepted(tiny):
    model, _ = tiny
    plain, spec = engine(model, False), engine(model, True)
    tokens(plain, PROMPTS, greedy())
    tokens(spec, PROMPTS, greedy())
    emitted = spec.counters["accepted_draft_tokens"] + spec.counters["verified_steps"]
    assert spec.counters["output_tokens"] == plain.counters["output_tokens"]
    assert emitted > spec.counters["verified_steps"], "a verification emits the kept drafts plus the target's token"
    assert spec.counters["steps"] <= plain.counters["steps"], (spec.counters["steps"], plain.counters["steps"])


class OracleProposer:
    """Drafts the plain engine's own continuation (a model drafting for itself), its last draft spoiled
    every `spoil` proposals: most drafts are accepted, some rejected."""

    def __init__(self, sequences: list[list[int]], spoil: int = 0):
        self.sequences, self.spoil, self.calls = sequences, spoil, 0

    def propose(self, token_ids, k: int) -> list[int]:
        self.calls += 1
        seq = next((s for s in self.sequences if s[: len(token_ids)] == list(token_ids)), None)
        if seq is None:  # the request's tokens left every plain output: say where, not a bare StopIteration
            ids = list(token_ids)
            where = max(next((i for i, (a, b) in enumerate(zip(s, ids)) if a != b), min(len(s), len(ids)))
                        for s in self.sequences)
            raise AssertionError(f"the request's tokens {ids[max(0, where - 3): where + 3]} (around position {where}) "
                                 "are no longer the plain engine's output: speculation changed a token that was emitted")
        drafts = seq[len(token_ids) : len(token_ids) + k]
        if self.spoil and drafts and self.calls % self.spoil == 0:
            drafts[-1] = (drafts[-1] + 1) % 320
        return drafts


def oracle_engine(model, plain, spoil=0, **config) -> LLMEngine:
    llm = engine(model, True, **config)
    llm.speculation.proposer = PromptLookup(OracleProposer([list(p) + o for p, o in zip(PROMPTS, plain)], spoil))
    return llm


@pytest.mark.task("9.3")
def test_a_model_drafting_for_itself_has_every_draft_accepted(tiny):
    model, _ = tiny
    plain_engine = engine(model, False)
    plain = tokens(plain_engine, PROMPTS, greedy())
    llm = oracle_engine(model, plain)
    ids = [llm.add_request(p, greedy()) for p in PROMPTS]
    emitted, runs = {rid: [] for rid in ids}, []
    while llm.has_unfinished():
        per_request: dict[str, int] = {}
        for event in llm.step():
            emitted[event.request_id].append(event.token_id)
            per_request[event.request_id] = per_request.get(event.request_id, 0) + 1
        runs += [n for n in per_request.values() if n > 1]  # a verification: every draft right, so 2+ tokens
    assert [emitted[rid] for rid in ids] == plain, first_difference([emitted[rid] for rid in ids], plain, "greedy output with speculation must be the plain engine's, token for token")
    c = llm.counters
    assert c["draft_tokens"] == c["accepted_draft_tokens"] > 0, f"every right draft is accepted: {c}"
    assert (c["verified_steps"], c["accepted_draft_tokens"]) == (len(runs), sum(runs) - len(runs)), (
        f"verified_steps counts the request-steps that verified drafts ({len(runs)} here, each emitting its kept "
        f"drafts and one more token: {sum(runs) - len(runs)} drafts kept); the counters say {c}")
    assert c["output_tokens"] == plain_engine.counters["output_tokens"]
    assert c["steps"] < plain_engine.counters["steps"] / 2, (c["steps"], plain_engine.counters["steps"])
    assert llm.num_request_blocks == 0


@pytest.mark.task("9.3")
def test_a_request_whose_chunk_computes_none_of_its_drafts_verifies_nothing(tiny):
    """A budget of 6 tokens for 7 requests drafting 4 each: a request's chunk often ends at its pending token,
    or the request is left out. It emits one token, or none, as without speculation, and verified_steps counts
    only the request-steps that scored a draft (every draft is right here: those emit 2 tokens or more)."""
    model, _ = tiny
    plain = tokens(engine(model, False, max_num_batched_tokens=6), PROMPTS, greedy())
    llm = oracle_engine(model, plain, max_num_batched_tokens=6)
    real_propose, drafted = llm.speculation.propose, set()

    def watching(running, num_waiting, eligible):
        before = {r.request_id: len(r.output_token_ids) for r in running}
        real_propose(running, num_waiting, eligible)
        drafted.clear()
        drafted.update(r.request_id for r in running if len(r.output_token_ids) > before[r.request_id])

    llm.speculation.propose = watching
    ids = [llm.add_request(p, greedy()) for p in PROMPTS]
    emitted, runs, cut_to_none = {rid: [] for rid in ids}, 0, 0
    while llm.has_unfinished():
        per_request: dict[str, int] = {}
        for event in llm.step():
            emitted[event.request_id].append(event.token_id)
            per_request[event.request_id] = per_request.get(event.request_id, 0) + 1
        runs += sum(n > 1 for n in per_request.values())
        cut_to_none += sum(per_request.get(rid) == 1 for rid in drafted)
    assert [emitted[rid] for rid in ids] == plain, first_difference([emitted[rid] for rid in ids], plain, "greedy output with speculation must be the plain engine's, token for token")
    assert cut_to_none > 0, "the budget was meant to leave some drafted request's chunk at its pending token"
    c = llm.counters
    assert c["draft_tokens"] == c["accepted_draft_tokens"] > 0, f"every right draft is accepted: {c}"
    assert c["verified_steps"] == runs, (
        f"verified_steps counts the request-steps that scored at least one draft ({runs} here); in {cut_to_none} "
        f"request-steps the budget cut a request's chunk to its pending token, so its drafts were all taken off and "
        f"nothing was verified, yet the counters say {c['verified_steps']}: a request that keeps none of its "
        "drafts after scheduling is a plain decode, not a verification")


@pytest.mark.task("9.3")
def test_each_drafted_position_is_scored_with_the_output_as_it_would_be_there(tiny):
    """Penalties, min_tokens and logprobs depend on the tokens before a position: a draft's position is
    scored over the output that ends just before it, so the tokens and logprobs equal the plain engine's."""
    model, _ = tiny
    settings = dict(repetition_penalty=1.5, presence_penalty=0.4, frequency_penalty=0.3, logprobs=2)
    plain_engine = engine(model, False)
    ids = [plain_engine.add_request(p, greedy(**settings)) for p in PROMPTS]
    plain = {rid: [] for rid in ids}
    while plain_engine.has_unfinished():
        for e in plain_engine.step():
            plain[e.request_id].append((e.token_id, e.logprob, e.top_logprobs))
    llm = oracle_engine(model, [[tok for tok, _, _ in plain[rid]] for rid in ids], spoil=3)
    spec_ids = [llm.add_request(p, greedy(**settings)) for p in PROMPTS]
    spec = {rid: [] for rid in spec_ids}
    while llm.has_unfinished():
        for e in llm.step():
            spec[e.request_id].append((e.token_id, e.logprob, e.top_logprobs))
    assert llm.counters["accepted_draft_tokens"] > 0
    for i, (a, b) in enumerate(zip(ids, spec_ids)):
        assert [x[0] for x in spec[b]] == [x[0] for x in plain[a]], f"prompt {i}: the tokens differ"
        for (_, lp, top), (_, want_lp, want_top) in zip(spec[b], plain[a]):
            assert lp == pytest.approx(want_lp, abs=1e-4), f"prompt {i}: a token's logprob differs"
            assert [t for t, _ in top] == [t for t, _ in want_top], f"prompt {i}: the top logprobs differ"


@pytest.mark.task("9.3")
def test_stops_inside_an_accepted_run_end_the_request_exactly_there(tiny):
    """max_tokens and stop tokens that fall inside a run of accepted drafts: nothing past them is emitted."""
    model, _ = tiny
    plain = tokens(engine(model, False), PROMPTS, greedy())
    for max_tokens in (1, 2, 3, 7, 13):
        llm = oracle_engine(model, plain, spoil=3)
        got, want = tokens(llm, PROMPTS, greedy(max_tokens=max_tokens)), [p[:max_tokens] for p in plain]
        assert got == want, first_difference(got, want, f"max_tokens={max_tokens} inside a run of accepted drafts ends the output exactly there")
    for i, output in enumerate(plain):
        for stop in sorted(set(output[1:-1]))[:4]:
            want = output[: output.index(stop) + 1]
            llm = oracle_engine(model, plain, spoil=3)
            got = tokens(llm, [PROMPTS[i]], greedy(stop_token_ids=[stop]))[0]
            assert got == want, f"prompt {i}, stop token {stop}: got {got}, want {want}"
            assert llm.num_request_blocks == 0
    for i, output in enumerate(plain):  # an end-of-sequence token inside a run (ignore_eos off)
        eos = output[len(output) // 2]
        llm = oracle_engine(model, plain, spoil=3)
        got = llm.generate([PROMPTS[i]], SamplingParams(max_tokens=MAX_TOKENS), eos_token_ids=[eos])[0]
        assert (got.token_ids, got.finish_reason) == (output[: output.index(eos) + 1], "stop"), f"prompt {i}, EOS {eos}"


@pytest.mark.task("9.3")
def test_the_radix_cache_holds_only_emitted_tokens_after_aborts_and_preemptions(tiny):
    model, _ = tiny
    llm = engine(model, True, num_blocks=40, max_num_batched_tokens=16)
    ids = [llm.add_request(p, greedy()) for p in PROMPTS]
    emitted = {rid: [] for rid in ids}
    for step in range(400):
        if not llm.has_unfinished():
            break
        for event in llm.step():
            emitted[event.request_id].append(event.token_id)
        for request in llm.scheduler.running:  # a rejected draft's slots went back at once
            held, needed = len(llm.memory.block_table(request.request_id)), blocks_needed(request.num_tokens, 4)
            assert held <= needed, f"step {step}: {request.request_id} holds {held} blocks for {request.num_tokens} tokens"
        if step == 5:
            llm.abort(ids[1])
        if step == 9:
            llm.abort(ids[2])
    sequences = [list(p) + emitted[rid] for p, rid in zip(PROMPTS, ids)]
    for path in cached_paths(llm.memory):
        assert any(seq[: len(path)] == path for seq in sequences), f"the cache holds tokens nobody emitted: {path}"
    assert llm.counters["draft_tokens"] > llm.counters["accepted_draft_tokens"] > 0
    assert llm.scheduler.num_preemptions > 0, "the small pool was meant to preempt"
    assert llm.num_request_blocks == 0
    llm.memory.check_integrity()


@pytest.mark.task("9.3")
def test_speculation_turns_itself_off_while_a_step_would_be_bound_by_compute(tiny):
    """No drafts in a step with a prompt to prefill or with more decoding requests than the step's draft
    bound leaves room for; the steps that did not draft are counted."""
    model, _ = tiny
    plain = tokens(engine(model, False), PROMPTS, greedy())
    llm = oracle_engine(model, plain, max_speculative_step_tokens=len(PROMPTS))  # no room for a single draft
    drafted_while_prefilling = []
    real_propose = llm.speculation.propose

    def watching(running, num_waiting, eligible):
        prefilling = num_waiting or any(r.num_computed_tokens < r.num_tokens - 1 for r in running)
        real_propose(running, num_waiting, eligible)
        drafted_while_prefilling.append(bool(prefilling and llm.speculation._drafts))

    llm.speculation.propose = watching
    got = tokens(llm, PROMPTS, greedy())
    assert got == plain, first_difference(got, plain, "greedy output with speculation must be the plain engine's, token for token")
    assert not any(drafted_while_prefilling), "a step with a prompt to prefill is bound by compute: no drafts"
    assert llm.counters["speculation_off_steps"] > 0, "the steps that did not draft are counted"
    assert llm.counters["draft_tokens"] > 0, "once requests finish, there is room to draft again"
    c = llm.counters
    assert c["draft_tokens"] <= c["steps"] * len(PROMPTS)


def joint_counts(llm: LLMEngine, prompt, n: int, params: SamplingParams) -> dict[tuple[int, ...], int]:
    """How often each pair of second and third tokens comes out of n unseeded requests (torch's global
    generator, seeded here). The first token comes from the prompt's prefill, never from a verification."""
    import torch

    torch.manual_seed(0)
    counts: dict[tuple[int, ...], int] = {}
    for _ in range(n // 10):  # ten at a time: no request waits, so every step may draft
        for g in llm.generate([prompt] * 10, params):
            counts[tuple(g.token_ids[1:])] = counts.get(tuple(g.token_ids[1:]), 0) + 1
    return counts


def two_sample_chi_square(a: dict, b: dict) -> tuple[float, int]:
    """Pearson's statistic for "a and b come from one distribution", over the outcomes seen 5+ times in all
    (rarer ones pooled into one cell); returns (statistic, degrees of freedom)."""
    na, nb = sum(a.values()), sum(b.values())
    cells, rare = [], [0, 0]
    for key in set(a) | set(b):
        pair = [a.get(key, 0), b.get(key, 0)]
        if sum(pair) >= 5:
            cells.append(pair)
        else:
            rare = [rare[0] + pair[0], rare[1] + pair[1]]
    if sum(rare):
        cells.append(rare)
    statistic = 0.0
    for x, y in cells:
        expected_a, expected_b = (x + y) * na / (na + nb), (x + y) * nb / (na + nb)
        statistic += (x - expected_a) ** 2 / expected_a + (y - expected_b) ** 2 / expected_b
    return statistic, len(cells) - 1


@pytest.mark.task("9.3")
def test_sampled_requests_keep_the_targets_distribution(tiny):
    """Sampled with drafts (the greedy continuation, often right): the outputs' distribution is the one
    without drafts. A draft that is a single token is accepted exactly when the target's own sample equals it."""
    model, _ = tiny
    prompt, n = PROMPTS[-1], 3000
    params = greedy(max_tokens=3, temperature=0.7, top_k=3)
    plain_engine = engine(model, False)
    greedy_out = tokens(plain_engine, [prompt], greedy(max_tokens=3))[0]
    llm = engine(model, True)

    class GreedyContinuation:  # drafts the greedy continuation while the sample has followed it
        def propose(self, token_ids, k):
            done = len(token_ids) - len(prompt)
            return greedy_out[done : done + k] if list(token_ids[len(prompt):]) == greedy_out[:done] else []

    llm.speculation.proposer = PromptLookup(GreedyContinuation())
    plain, spec = joint_counts(plain_engine, prompt, n, params), joint_counts(llm, prompt, n, params)
    c = llm.counters
    assert c["accepted_draft_tokens"] > 0 and c["draft_tokens"] > c["accepted_draft_tokens"], c
    statistic, df = two_sample_chi_square(plain, spec)
    # the 0.1% critical value of chi-square (Wilson-Hilferty): the reference passes with a fixed seed,
    # a rule that keeps drafts the sample did not choose is far above it
    z = 3.09
    critical = df * (1 - 2 / (9 * df) + z * (2 / (9 * df)) ** 0.5) ** 3
    assert statistic < critical, (f"with drafts the outputs are distributed differently (chi-square {statistic:.1f} "
                                  f"on {df} degrees of freedom, 0.1% critical value {critical:.1f}): {spec} vs {plain}")


@pytest.mark.ungraded  # provided code: the proposer's budget
def test_the_proposer_searches_a_bounded_window_of_a_long_request():
    from miniyaie.scheduler import Request
    from miniyaie.speculative.step import search_window

    for prompt_len, output_len in [(5000, 0), (5000, 100), (10, 3000), (3, 4)]:
        request = Request("r", list(range(prompt_len)), max_tokens=5000, output_token_ids=list(range(-output_len, 0)))
        want = request.all_token_ids[-8:]
        got = search_window(request, 8)
        assert got == want, f"prompt {prompt_len}, output {output_len}: {got} != the last 8 tokens {want}"


@pytest.mark.task("9.3")
@pytest.mark.bundled_model
def test_smollm2_with_speculation_answers_exactly_as_without_it():
    """The bundled model, a request to repeat a passage (drafts mostly accepted) and one that asks a question
    (drafts mostly rejected): the same tokens with and without speculation, the first in far fewer steps."""
    from miniyaie.engine import InferenceEngine

    pool = 64 << 20  # K/V for 1,456 tokens: plenty here, where the default GiB would be filled with zeros twice
    plain = InferenceEngine("smollm2", EngineConfig(kv_cache_bytes=pool))
    spec = InferenceEngine("smollm2", EngineConfig(kv_cache_bytes=pool), speculative="ngram", num_speculative_tokens=4)
    try:
        passage = "The scheduler hands out at most max_num_batched_tokens tokens per step, oldest requests first."
        prompts = [f"Repeat the following text exactly, word for word:\n\n{passage}", "What is the capital of France?"]
        for prompt in prompts:
            before = (plain.get_stats()["steps"], spec.get_stats()["steps"])
            a = plain.generate(prompt, max_tokens=48, temperature=0)
            b = spec.generate(prompt, max_tokens=48, temperature=0)
            assert b.token_ids == a.token_ids and b.text == a.text, f"{prompt!r}: {b.text!r} != {a.text!r}"
            if prompt is prompts[0]:
                steps = (plain.get_stats()["steps"] - before[0], spec.get_stats()["steps"] - before[1])
                assert steps[1] < steps[0], f"the copy took {steps[1]} steps with drafts, {steps[0]} without"
        stats = spec.get_stats()["speculative"]
        assert stats["method"] == "ngram" and stats["accepted_draft_tokens"] > 0 and stats["mean_accepted_length"] > 1
        assert spec.get_stats()["kv_blocks"]["held_by_requests"] == 0
    finally:
        plain.close()
        spec.close()


class AskRecorder:
    """A proposer that records what it is asked for and drafts exactly that many tokens (7, 7, ...)."""

    def __init__(self):
        self.asked: dict[str, int] = {}

    def draft(self, wanted):
        self.asked = {r.request_id: k for r, k in wanted}
        return {r.request_id: [7] * k for r, k in wanted}

    def forget(self, request_id):
        pass


def decoding_request(i: int, room: int) -> Request:
    """A request whose only uncomputed token is its last, with `room` tokens left before max_tokens (the
    target's own next token included)."""
    request = Request(f"r{i}", [1, 2, 3], max_tokens=room + 2)
    request.output_token_ids.append(5)
    request.num_computed_tokens = request.num_tokens - 1
    return request


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 6), st.booleans()), min_size=1, max_size=6),
       st.integers(0, 2), st.integers(1, 6), st.integers(1, 16))
@example([(True, 6, True)], 0, 8, 6).via("one request alone: the whole budget but its own token")
@example([(True, 6, True)], 0, 8, 2).via("room for exactly one draft")
@example([(True, 6, True)] * 3, 0, 8, 5).via("the budget cannot give each a draft: off, and counted")
@example([(True, 6, True)] * 2, 1, 4, 16).via("a request waits: off, and counted")
@example([(True, 6, True), (False, 6, True)], 0, 4, 16).via("a running prompt, nobody waiting: off, and counted")
@example([(True, 1, True), (True, 0, True), (True, 6, False)], 0, 4, 16).via("room and eligibility per request")
@pytest.mark.task("9.3")
def test_propose_asks_each_request_for_the_drafts_the_step_can_carry(requests, num_waiting, num_tokens, max_step):
    """Speculation.propose against its contract: who is asked, for how many, and when the step is counted off.
    Each request is (decoding?, room before max_tokens, eligible?)."""
    running = []
    for i, (decoding, room, _) in enumerate(requests):
        request = decoding_request(i, room)
        if not decoding:  # a prompt still being prefilled: more than its last token to compute
            request.num_computed_tokens = 1
        running.append(request)
    eligible_ids = {f"r{i}" for i, (_, _, ok) in enumerate(requests) if ok}
    decoding = [r for r, (d, _, _) in zip(running, requests) if d]
    drafting = [r for r in decoding if r.request_id in eligible_ids]
    assume(drafting or len(decoding) != max_step)  # the one budget edge the contract leaves open
    off = bool(num_waiting) or len(decoding) < len(running) or len(decoding) + len(drafting) > max_step
    want = {}
    if not off:
        k = min(num_tokens, (max_step - len(decoding)) // max(1, len(drafting)))
        want = {r.request_id: min(k, room) for r, (_, room, _) in zip(running, requests) if r in drafting and room > 0}

    recorder, counters = AskRecorder(), dict(speculation_off_steps=0)
    speculation = Speculation(recorder, num_tokens, memory=None, counters=counters, max_step_tokens=max_step)
    before = {r.request_id: list(r.output_token_ids) for r in running}
    speculation.propose(running, num_waiting, lambda r: r.request_id in eligible_ids)
    story = (f"{len(running)} running ({len(decoding)} decoding, {len(drafting)} may draft), {num_waiting} waiting, "
             f"num_tokens {num_tokens}, max_step_tokens {max_step}")
    assert {rid: n for rid, n in recorder.asked.items() if n > 0} == want, (
        f"{story}: the proposer should be asked for {want or 'nothing'} (each may-draft request the same share of "
        f"what the decoding requests' own tokens leave, at most num_tokens, within its max_tokens), not {recorder.asked}")
    for r in running:
        added = r.output_token_ids[len(before[r.request_id]):]
        assert added == [7] * want.get(r.request_id, 0), f"{story}: request {r.request_id} got {added} appended"
    assert counters["speculation_off_steps"] == int(off and bool(decoding)), (
        f"{story}: a step turned off while requests decode counts once in speculation_off_steps "
        f"(off here: {off}), got {counters['speculation_off_steps']}")
