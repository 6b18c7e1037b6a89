"""Speculation among other requests: a seeded request's tokens do not depend on its batch, a draft model's
prefill is chunked like the target's and shared by the completions of one prompt, and the counters count
the tokens callers get.

Oracles: the engine without speculation (a seeded request's tokens alone, without drafts), the target
drafting for itself (every draft accepted only if the draft's cache is right) and the responses' usage.
"""

import random
import sys
from pathlib import Path

import pytest
from token_diff import first_difference
from hypothesis import example, given, settings
from hypothesis import strategies as st

sys.path.append(str(Path(__file__).resolve().parents[1] / "ch00_model"))
sys.path.append(str(Path(__file__).resolve().parents[1] / "ch05_engine"))
from tiny_models import save_tiny_model  # noqa: E402

from miniyaie.engine import EngineConfig, LLMEngine  # noqa: E402
from miniyaie.engine.sampling_params import SamplingParams  # noqa: E402

RNG = random.Random(2)
OTHERS = [[RNG.randrange(320) for _ in range(RNG.randrange(3, 20))] for _ in range(5)]
COPY = [5, 6, 7, 8] * 6  # a prompt the n-gram proposer drafts from at every step
SEEDED = SamplingParams(max_tokens=24, temperature=0.8, seed=42, ignore_eos=True)


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    from miniyaie.model import load_model

    path = tmp_path_factory.mktemp("tiny-llama-load")
    save_tiny_model("llama", path, max_position_embeddings=512)  # room for a long prompt
    return load_model(path)


def engine(model, speculative=None, **config) -> LLMEngine:
    settings_ = dict(block_size=4, num_blocks=200, max_num_batched_tokens=32)
    if speculative:
        settings_.update(speculative=speculative, max_speculative_step_tokens=64)
    return LLMEngine(model, EngineConfig(**{**settings_, **config}), draft_model=model if speculative == "draft" else None)


def run(llm: LLMEngine, requests: list[tuple[list[int], SamplingParams]]) -> list[list[int]]:
    ids = [llm.add_request(prompt, params) for prompt, params in requests]
    out = {rid: [] for rid in ids}
    while llm.has_unfinished():
        for event in llm.step():
            out[event.request_id].append(event.token_id)
    return [out[rid] for rid in ids]


OTHER_PARAMS = st.sampled_from([
    SamplingParams(max_tokens=24, ignore_eos=True),  # greedy
    SamplingParams(max_tokens=24, temperature=1.0, ignore_eos=True),  # sampled, unseeded: the global generator
    SamplingParams(max_tokens=24, temperature=0.7, top_k=5, seed=7, ignore_eos=True),  # seeded, filtered
    SamplingParams(max_tokens=9, temperature=0.9, seed=3, ignore_eos=True),  # ends early
])


def seeded_tokens_in_a_mix(target, others, position, method, **config) -> tuple[list[int], list[int]]:
    """(the seeded copy request's tokens alone without drafts, its tokens among `others` with `method` drafting)."""
    want = run(engine(target), [(COPY, SEEDED)])[0]
    requests = [(OTHERS[i], params) for i, params in others]
    requests.insert(min(position, len(requests)), (COPY, SEEDED))
    llm = engine(target, method, **config)
    got = run(llm, requests)[min(position, len(others))]
    assert llm.num_request_blocks == 0
    return want, got


def different_tokens(method: str, k: int, n_others: int, got, want) -> str:
    return (f"with {method} speculation (k={k}) among {n_others} other requests the seeded request wrote {got}, "
            f"alone and without drafts {want}: a verify step must draw, for each output position, the number that "
            "position would get decoding one token at a time (the numbers behind rejected drafts are not used up)")


@settings(max_examples=12)
@given(others=st.lists(st.tuples(st.sampled_from(range(len(OTHERS))), OTHER_PARAMS), max_size=4),
       position=st.integers(0, 4), k=st.integers(1, 5), budget=st.sampled_from([8, 16, 32]),
       step_tokens=st.integers(2, 40))
@example([(i, SamplingParams(max_tokens=24, temperature=0.8, ignore_eos=True)) for i in range(4)], 0, 4, 32, 64).via(
    "the copy request first of five, its neighbours sampling")
@example([], 0, 4, 32, 64).via("alone, drafting at every step")
@example([(0, SamplingParams(max_tokens=24, ignore_eos=True))] * 4, 2, 5, 8, 6).via(
    "a tight budget: drafts for some steps and not others")
@pytest.mark.task("9.3")
def test_a_seeded_request_draws_the_same_tokens_whatever_shares_its_steps(target, others, position, k, budget, step_tokens):
    """SamplingParams.seed: the same seed, the same tokens, whatever else is in the batch. How many drafts a
    request verifies in a step depends on the others (the step's draft budget), so the seeded request's tokens
    must equal its tokens decoded alone without any drafts."""
    want, got = seeded_tokens_in_a_mix(target, others, position, "ngram", num_speculative_tokens=k,
                                       max_num_batched_tokens=budget, max_speculative_step_tokens=step_tokens)
    assert got == want, different_tokens("n-gram", k, len(others), got, want)


@pytest.mark.parametrize("others,position,k,step_tokens", [
    ([], 0, 4, 64),
    ([(i, SamplingParams(max_tokens=24, temperature=0.8, ignore_eos=True)) for i in range(4)], 0, 3, 64),
    ([(0, SamplingParams(max_tokens=24, ignore_eos=True))] * 4, 2, 5, 6),
], ids=["alone", "first-of-five", "tight-budget"])
@pytest.mark.task("9.4")
def test_a_seeded_request_drafted_by_a_model_draws_the_same_tokens_whatever_shares_its_steps(target, others, position,
                                                                                            k, step_tokens):
    want, got = seeded_tokens_in_a_mix(target, others, position, "draft", num_speculative_tokens=k,
                                       max_speculative_step_tokens=step_tokens)
    assert got == want, different_tokens("draft-model", k, len(others), got, want)


@pytest.mark.task("9.3")
def test_a_seeded_copy_request_drafts_and_still_matches_plain_decoding(target):
    """The copy prompt drafts at every step; some drafts are accepted: the seeded tokens still equal plain decoding's."""
    want = run(engine(target), [(COPY, SEEDED)])[0]
    llm = engine(target, "ngram", num_speculative_tokens=4)
    got = run(llm, [(COPY, SEEDED)] + [(p, SEEDED) for p in OTHERS[:2]])[0]
    assert got == want, first_difference(got, want, "a seeded request's tokens with n-gram drafts must be plain decoding's")
    assert llm.counters["draft_tokens"] > 0


def draft_passes(llm: LLMEngine) -> list[int]:
    """Record the tokens of every forward pass of the draft model (wrapping its runner's forward)."""
    runner, sizes = llm.speculation.proposer.runner, []
    real_forward = runner.forward

    def forward(input_ids, positions, meta, rows):
        sizes.append(int(input_ids.numel()))
        return real_forward(input_ids, positions, meta, rows)

    runner.forward = forward
    return sizes


@pytest.mark.task("9.4")
def test_a_long_prompt_is_caught_up_by_the_draft_model_in_chunks_of_the_long_prefill_bound(target):
    """One request decoding, a 300-token prompt arriving: no pass of the draft model computes the whole prompt
    (it would stall the other request's step); the draft catches up a chunk per step, then drafts, and the
    target drafting for itself still has every draft accepted (the chunks' K/V are right)."""
    long_prompt = [RNG.randrange(320) for _ in range(300)]
    greedy = SamplingParams(max_tokens=30, ignore_eos=True)
    want = run(engine(target), [(OTHERS[0], greedy), (long_prompt, greedy)])
    llm = engine(target, "draft", long_prefill_token_threshold=16, num_speculative_tokens=3)
    sizes = draft_passes(llm)
    first = llm.add_request(OTHERS[0], greedy)
    out = {first: []}
    for _ in range(3):  # the first request is decoding, with drafts, when the long prompt arrives
        for event in llm.step():
            out[event.request_id].append(event.token_id)
    second = llm.add_request(long_prompt, greedy)
    out[second] = []
    while llm.has_unfinished():
        for event in llm.step():
            out[event.request_id].append(event.token_id)
    assert [out[first], out[second]] == want, "with a draft model the target's greedy output must not change"
    bound = 16 + 2 * (3 + 1)  # the long-prefill bound, plus each decoding request's own tokens and drafts
    assert max(sizes) <= bound, (
        f"a forward pass of the draft model computed {max(sizes)} tokens: a prompt the draft has not seen must be "
        f"computed in chunks of at most long_prefill_token_threshold=16 tokens per step (passes: {sizes})")
    c = llm.counters
    assert c["accepted_draft_tokens"] == c["draft_tokens"] > 0, f"the target drafting for itself: every draft accepted ({c})"
    assert llm.speculation.proposer.memory.num_used_blocks == 0


@pytest.mark.task("9.4")
def test_the_completions_of_one_prompt_share_the_draft_models_prefill(target):
    """n = 3 completions of a 200-token prompt: the draft model computes the prompt once, not three times."""
    prompt = [RNG.randrange(320) for _ in range(200)]
    params = SamplingParams(n=3, max_tokens=12, ignore_eos=True)
    plain = engine(target)
    want = plain.generate([prompt], params)[0]
    llm = engine(target, "draft", long_prefill_token_threshold=32, num_speculative_tokens=3)
    got = llm.generate([prompt], params)[0]
    assert got.token_ids == want.token_ids, first_difference(
        got.token_ids, want.token_ids, "the first completion with a draft model must be the plain engine's, token for token")
    proposer = llm.speculation.proposer
    assert proposer.computed_tokens < 1.5 * len(prompt), (
        f"the draft model computed {proposer.computed_tokens} tokens for 3 completions of a {len(prompt)}-token prompt "
        "and 12 tokens each: the completions must share the prompt's K/V in the draft's pool too")
    c = llm.counters
    assert c["accepted_draft_tokens"] == c["draft_tokens"] > 0, f"shared K/V must be the prompt's: every draft accepted ({c})"
    assert proposer.memory.num_used_blocks == 0


# ------------------------------------------------------------------ the counters against the responses' usage
@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    from tiny_tokenizer import save_tiny_chat_model

    from miniyaie.model import load

    directory = tmp_path_factory.mktemp("tiny-llama-chat-spec")
    save_tiny_chat_model(directory)
    return load(str(directory))


class Continuation:
    """Drafts a known continuation of the token list (the plain engine's greedy output): every draft accepted."""

    def __init__(self, sequences: list[list[int]]):
        self.sequences = sequences

    def propose(self, token_ids, k: int) -> list[int]:
        seq = next((s for s in self.sequences if s[: len(token_ids)] == list(token_ids)), None)
        return [] if seq is None else seq[len(token_ids) : len(token_ids) + k]


@pytest.mark.task("9.3")
def test_output_counters_count_the_tokens_returned_when_a_stop_string_cuts_accepted_drafts(chat_model):
    """Each step emits up to six tokens of a request (five accepted drafts and the target's own); a stop string
    that matches at one of them ends the request there. /stats and get_stats() count what the callers got."""
    from miniyaie.engine import InferenceEngine
    from miniyaie.speculative.step import PromptLookup

    prompts = ["hello world, hello engine", "The capital of France is", "Once upon a time there was"]
    config = EngineConfig(block_size=4, num_blocks=200, speculative="ngram", num_speculative_tokens=5,
                          max_speculative_step_tokens=64)
    with InferenceEngine(chat_model, config) as spec:
        plain = spec.generate(prompts, max_tokens=30, ignore_eos=True)
        spec.llm.speculation.proposer = PromptLookup(Continuation([r.prompt_token_ids + r.outputs[0].token_ids for r in plain]))
        before, sampled_before = spec.get_stats()["tokens"]["output"], spec.llm.counters["output_tokens"]
        results = []
        for prompt, result in zip(prompts, plain):
            text = result.text
            for cut in (7, 10, 15, 20):  # stop strings that end the text at several points: most fall inside a step's run
                results.append(spec.generate(prompt, max_tokens=30, ignore_eos=True, stop=[text[cut - 2 : cut]]))
        returned = sum(len(r.outputs[0].token_ids) for r in results)
        stats = spec.get_stats()
        assert stats["speculative"]["accepted_draft_tokens"] > 0
        assert spec.llm.counters["output_tokens"] - sampled_before > returned, (
            "the steps were meant to emit tokens after a stop string (drafts accepted past it)")
        assert stats["tokens"]["output"] - before == returned, (
            f"the stats count {stats['tokens']['output'] - before} output tokens for requests whose usage says "
            f"{returned}: tokens emitted after a stop string in the same step were never returned")
