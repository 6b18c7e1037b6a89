"""Task 9.4, drafts from a smaller model: its own cache follows the request, and the target's output is unchanged.

The strongest check is a model drafting for itself: its greedy drafts are exactly what the target will
choose, so every draft must be accepted, and one that is not means the draft's cache held something that
is no longer the request's (a rejected draft's K/V, or a position computed twice). A draft model near the
target (its weights with noise) has some drafts accepted and some rejected: both paths run.
"""

import random
import sys
from pathlib import Path

import pytest
import torch

sys.path.append(str(Path(__file__).resolve().parents[1] / "ch00_model"))
from tiny_models import save_tiny_model  # noqa: E402

from miniyaie.engine import EngineConfig, LLMEngine  # noqa: E402
from miniyaie.engine.sampling_params import SamplingParams  # noqa: E402
from miniyaie.paged import blocks_needed  # noqa: E402
from miniyaie.scheduler import Request  # noqa: E402

RNG = random.Random(1)
PROMPTS = [[RNG.randrange(320) for _ in range(RNG.randrange(3, 30))] for _ in range(5)]
MAX_TOKENS = 24
CONFIGS = {
    "radix": dict(),
    "paged": dict(enable_prefix_caching=False),
    "block-1": dict(block_size=1),
    "tight-budget": dict(block_size=16, max_num_batched_tokens=8),
    "preemption": dict(num_blocks=24, max_num_batched_tokens=16),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """The target, a draft near it (its weights with noise) and a model with another vocabulary."""
    from miniyaie.model import load_model

    path = tmp_path_factory.mktemp("tiny-llama-draft")
    save_tiny_model("llama", path / "target")
    save_tiny_model("llama", path / "small-vocab", vocab_size=300)
    target, near = load_model(path / "target"), load_model(path / "target")
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for weight in near.parameters():
            weight.add_(torch.randn(weight.shape, generator=generator) * weight.std() * 0.05)
    return target, near, load_model(path / "small-vocab")


@pytest.fixture(scope="module")
def plain_outputs(models):
    """The target's greedy outputs without drafts, per configuration (computed once for both tests)."""
    target, _, _ = models
    return {name: run(engine(target, **config)) for name, config in CONFIGS.items()}


def engine(model, draft=None, **config) -> LLMEngine:
    settings = dict(block_size=4, num_blocks=200, max_num_batched_tokens=32)
    if draft is not None:
        settings.update(speculative="draft", num_speculative_tokens=4, max_speculative_step_tokens=64)
    return LLMEngine(model, EngineConfig(**{**settings, **config}), draft_model=draft)


def greedy() -> SamplingParams:
    return SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)


def run(llm: LLMEngine) -> list[list[int]]:
    """Every prompt through `llm`, checking after each step that the draft's pool holds no more blocks than
    the tokens of the requests it follows need (a rejected draft's block must come back)."""
    ids = [llm.add_request(p, greedy()) for p in PROMPTS]
    out = {rid: [] for rid in ids}
    while llm.has_unfinished():
        for event in llm.step():
            out[event.request_id].append(event.token_id)
        proposer = llm.speculation.proposer if llm.speculation is not None else None
        if proposer is not None:
            need = sum(blocks_needed(c.request.num_computed_tokens, llm.config.block_size) for c in proposer.copies.values())
            assert proposer.memory.num_used_blocks <= need, (
                f"the draft's pool holds {proposer.memory.num_used_blocks} blocks, but the K/V it still needs fill "
                f"{need}: a rejected draft's block was not given back")
    return [out[rid] for rid in ids]


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.task("9.4")
def test_the_target_drafting_for_itself_has_every_draft_accepted(models, plain_outputs, name):
    target, _, _ = models
    llm = engine(target, target, **CONFIGS[name])
    assert run(llm) == plain_outputs[name], "with a draft model the target's greedy output must not change"
    c = llm.counters
    assert c["draft_tokens"] > 0, f"the draft model never drafted: {c}"
    assert c["accepted_draft_tokens"] == c["draft_tokens"], (
        f"the target drafting for itself must have every draft accepted, but {c['draft_tokens'] - c['accepted_draft_tokens']} "
        f"of {c['draft_tokens']} were rejected: the draft's cache held K/V that are not the request's tokens any more "
        "(a rejected draft's, or none where a token was emitted)")
    assert llm.num_request_blocks == 0 and llm.speculation.proposer.memory.num_used_blocks == 0, (
        "every block of the target's and of the draft's pool must be back when every request ended")


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.task("9.4")
def test_a_draft_model_near_the_target_changes_no_token(models, plain_outputs, name):
    target, near, _ = models
    llm = engine(target, near, **CONFIGS[name])
    assert run(llm) == plain_outputs[name], "with a draft model the target's greedy output must not change"
    c = llm.counters
    assert c["draft_tokens"] > c["accepted_draft_tokens"] > 0, f"both paths must run (accepted and rejected): {c}"
    assert llm.speculation.proposer.memory.num_used_blocks == 0, "the draft's blocks must be back at the end"


@pytest.mark.task("9.4")
def test_the_drafts_cache_keeps_exactly_the_accepted_drafts(models):
    """Driven by hand: the copy computes the request's tokens and all drafts but the last; after the target
    keeps m of them and adds its own token, the copy's computed tokens are the request's first ones up to
    the first rejected draft, and its blocks are those tokens' blocks."""
    target, near, _ = models
    proposer = engine(target, near, block_size=2).speculation.proposer
    unseen = Request("unseen", [2, 7, 1, 8], max_tokens=50, output_token_ids=[2])
    copy = proposer._follow(unseen)
    assert copy is proposer.copies.get("unseen") and copy.request.all_token_ids == unseen.all_token_ids, (
        "following a request the draft has not seen makes its copy (kept in proposer.copies): the request's tokens")
    assert copy.request.num_computed_tokens == 0, "a request the draft has not seen starts with nothing computed"
    proposer.forget("unseen")
    request = Request("r", [3, 1, 4, 1, 5], max_tokens=50)
    request.output_token_ids.append(9)  # the pending token: sampled, not computed
    drafts = proposer.draft([(request, 4)])["r"]
    proposer._follow(request)  # the step left the request out: nothing emitted, every draft taken off
    assert proposer.copies["r"].request.num_computed_tokens == request.num_tokens - 1, (
        "with nothing emitted the draft's K/V of every known token are still right, but the first draft needs the "
        "logits of the last one: it must be computed again (num_computed_tokens = the request's tokens - 1)")
    for kept in (0, 2, 4, 1):
        known = request.num_tokens
        drafts = proposer.draft([(request, 4)])["r"]
        copy = proposer.copies["r"]
        assert len(drafts) == 4 and copy.request.num_computed_tokens == known + 3, (
            f"drafting 4 tokens computes the {known} known tokens and the first 3 drafts (the last is only proposed); "
            f"the copy says {copy.request.num_computed_tokens} computed")
        own = (drafts[kept] + 1) % 320 if kept < 4 else 7  # the target's token: not the draft it replaces
        request.output_token_ids += drafts[:kept] + [own]
        proposer._follow(request)
        computed = known + min(kept, 3)
        assert copy.request.num_computed_tokens == computed, (
            f"after {kept} of 4 drafts were accepted the draft's K/V stay right for the first {computed} tokens, "
            f"but the copy counts {copy.request.num_computed_tokens}")
        assert copy.request.all_token_ids == request.all_token_ids, "the copy's tokens must be the request's"
        assert proposer.memory.num_used_blocks == blocks_needed(computed, 2), (
            f"{computed} computed tokens need {blocks_needed(computed, 2)} blocks of 2; the draft's pool holds "
            f"{proposer.memory.num_used_blocks}: the rejected drafts' blocks must come back")
    proposer.forget("r")
    assert proposer.memory.num_used_blocks == 0 and "r" not in proposer.copies


@pytest.mark.parametrize("agreeing", [0, 1, 3, 4])
@pytest.mark.task("9.4")
def test_tokens_that_came_while_the_draft_was_idle_are_checked_against_its_drafts(models, agreeing):
    """Speculation was off for a few steps (a prompt was being prefilled): the target wrote several tokens of
    its own, one per step, while the copy still holds the K/V of its last drafts. Only the drafts those tokens
    repeat, up to the first that differs, are still right; after following, the next drafts are what plain
    greedy decoding with the draft model gives."""
    target, near, _ = models
    proposer = engine(target, near, block_size=2).speculation.proposer
    request = Request("r", [3, 1, 4, 1, 5], max_tokens=50)
    request.output_token_ids.append(9)  # the pending token: sampled, not computed
    known = request.num_tokens
    drafts = proposer.draft([(request, 4)])["r"]
    differ = [(drafts[agreeing] + 1) % 320] if agreeing < 4 else []  # the target's token where it left the drafts
    came = drafts[:agreeing] + differ + [11, 12, 13]
    request.output_token_ids += came  # several tokens, no drafting in between
    proposer._follow(request)
    copy, computed = proposer.copies["r"], known + min(agreeing, 3)
    got = copy.request.num_computed_tokens
    assert got == computed, (
        f"the copy computed the {known} known tokens and drafts {drafts[:3]}; then {len(came)} tokens came without "
        f"drafting: {came}. Its K/V stay right only up to the first draft that differs from the token that came "
        f"at its position ({agreeing} agree): {computed} tokens, but the copy counts {got}. A draft the new tokens "
        "do not repeat is a rejected draft, whether the target rejected it in a verification or wrote past it alone")
    assert copy.request.all_token_ids == request.all_token_ids, "the copy's tokens must be the request's"
    assert proposer.memory.num_used_blocks == blocks_needed(computed, 2), (
        f"{computed} computed tokens need {blocks_needed(computed, 2)} blocks of 2; the draft's pool holds "
        f"{proposer.memory.num_used_blocks}: the rejected drafts' blocks must come back")
    again = proposer.draft([(request, 3)])["r"]
    alone = run_alone(near, request.all_token_ids, 3)
    assert again == alone, (f"after the tokens that came while it was idle the draft proposes {again}, but greedy "
                            f"decoding with the draft model alone gives {alone}")


@pytest.mark.task("9.4")
def test_a_round_of_drafting_runs_the_draft_model_on_each_token_once(models):
    """Three requests wanting 4, 2 and 3 drafts, twice: the draft model (wrapped here to count the tokens it is
    run on) computes each token it has not computed once, and each draft but the last once, in each round."""
    target, near, _ = models
    proposer = engine(target, near).speculation.proposer
    proposer.max_prefill_tokens = 1000  # every prompt is caught up with in the first call
    counted = []
    hook = near.register_forward_pre_hook(lambda module, args: counted.append(args[0].numel()))
    try:
        requests = [Request(f"r{i}", prompt, max_tokens=50) for i, prompt in enumerate(PROMPTS[:3])]
        for request in requests:
            request.output_token_ids.append(9)
        wanted = list(zip(requests, (4, 2, 3)))
        backlogs = [request.num_tokens for request in requests]  # the draft has computed nothing yet
        for round_ in ("first", "second"):
            counted.clear()
            drafts = proposer.draft(wanted)
            want = sum(backlogs) + sum(k - 1 for _, k in wanted)
            assert sum(counted) == want, (
                f"{round_} round: drafting {[k for _, k in wanted]} tokens for requests with {backlogs} tokens the "
                f"draft had not computed ran the draft model on {sum(counted)} tokens in {len(counted)} passes; "
                f"computing each of those tokens once and each draft but the last once makes {want}: a pass must "
                "compute only what no earlier pass computed (the draft before it), not every token since the copy "
                "was last in line with the request")
            backlogs = []  # the target keeps 1, all (2) and none of the drafts, and writes a token of its own
            for (request, k), kept in zip(wanted, (1, 2, 0)):
                own = (drafts[request.request_id][kept] + 1) % 320 if kept < k else 7
                request.output_token_ids += drafts[request.request_id][:kept] + [own]
                backlogs.append(1 if kept < k else 2)  # its own token (and the last draft, never computed)
    finally:
        hook.remove()


@pytest.mark.task("9.4")
def test_one_round_drafts_every_request_in_k_batched_passes(models):
    """Three requests asking for 4, 2 and 3 drafts: 4 forward passes of the draft model in all (one per draft
    position, every request that still wants one in the same pass), each request getting what plain greedy
    decoding with the draft model would give."""
    target, near, _ = models
    proposer = engine(target, near).speculation.proposer
    proposer.max_prefill_tokens = 1000  # every prompt is caught up with in this one call
    requests = [Request(f"r{i}", prompt, max_tokens=50) for i, prompt in enumerate(PROMPTS[:3])]
    for request in requests:
        request.output_token_ids.append(9)
    passes = proposer.forward_passes
    drafts = proposer.draft([(requests[0], 4), (requests[1], 2), (requests[2], 3)])
    assert proposer.forward_passes - passes == 4, (
        f"drafting 4, 2 and 3 tokens took {proposer.forward_passes - passes} forward passes of the draft model: "
        "one pass per draft position for all the requests that still want one makes 4")
    for request, k in zip(requests, (4, 2, 3)):
        alone = run_alone(near, request.all_token_ids, k)
        assert drafts[request.request_id] == alone, (
            f"request {request.request_id}: drafted {drafts[request.request_id]}, but greedy decoding with the draft "
            f"model alone gives {alone}")


def run_alone(model, tokens: list[int], k: int) -> list[int]:
    """Plain greedy decoding of k tokens with `model` on its own engine."""
    return LLMEngine(model, EngineConfig(block_size=4, num_blocks=100)).generate(
        [tokens], SamplingParams(max_tokens=k, ignore_eos=True))[0].token_ids


@pytest.mark.task("9.4")
def test_aborted_and_stopped_requests_give_the_drafts_blocks_back(models):
    target, near, _ = models
    llm = engine(target, near)
    ids = [llm.add_request(p, greedy()) for p in PROMPTS]
    for _ in range(4):
        llm.step()
    llm.abort(ids[0])
    llm.finish(ids[1])
    while llm.has_unfinished():
        llm.step()
    assert llm.speculation.proposer.memory.num_used_blocks == 0 and not llm.speculation.proposer.copies, (
        "an aborted, a stopped and a finished request must each give the draft's blocks back")


@pytest.mark.ungraded  # provided code: the engine's checks at start
def test_a_draft_model_with_another_vocabulary_or_none_is_refused(models):
    target, _, small_vocab = models
    with pytest.raises(ValueError, match="vocabulary"):
        engine(target, small_vocab)
    with pytest.raises(ValueError, match="draft model"):
        LLMEngine(target, EngineConfig(speculative="draft", num_blocks=50))
    with pytest.raises(ValueError, match="draft_model is used only"):
        EngineConfig(speculative="ngram", draft_model="somewhere")


@pytest.mark.bundled_model
@pytest.mark.task("9.4")
def test_smollm2_drafting_for_itself_has_every_draft_accepted():
    from miniyaie.engine import InferenceEngine

    prompt = "Repeat exactly: the quick brown fox jumps over the lazy dog."
    pool = 64 << 20  # K/V for 1,456 tokens: plenty here, where the default GiB would be filled with zeros twice
    plain_engine, engine = InferenceEngine("smollm2", EngineConfig(kv_cache_bytes=pool)), None
    try:
        plain = plain_engine.generate(prompt, SamplingParams(max_tokens=24))
        loaded = plain_engine.loaded  # the same weights drafting for themselves: loaded once
        engine = InferenceEngine(loaded, EngineConfig(kv_cache_bytes=pool), speculative="draft", draft_model=loaded,
                                 num_speculative_tokens=3)
        spec = engine.generate(prompt, SamplingParams(max_tokens=24))
        assert spec.text == plain.text
        stats = engine.get_stats()["speculative"]
        assert stats["method"] == "draft" and stats["acceptance_rate"] == 1.0, stats
    finally:
        plain_engine.close()
        if engine is not None:
            engine.close()


@pytest.mark.task("9.4")
def test_a_draft_model_with_another_tokenizer_is_refused_by_name(tmp_path):
    """Given by path, the draft's tokenizer is compared with the target's: the same ids must mean the same text."""
    import json
    import shutil

    sys.path.append(str(Path(__file__).resolve().parents[1] / "ch05_engine"))
    from tiny_tokenizer import save_tiny_chat_model

    from miniyaie.engine import InferenceEngine

    save_tiny_chat_model(tmp_path / "target")
    shutil.copytree(tmp_path / "target", tmp_path / "other")
    tokenizer_file = tmp_path / "other" / "tokenizer.json"
    tokenizer = json.loads(tokenizer_file.read_text())
    vocab = tokenizer["model"]["vocab"]
    a, b = sorted(vocab)[100:102]
    vocab[a], vocab[b] = vocab[b], vocab[a]  # two tokens trade ids: the same vocabulary size, other meanings
    tokenizer_file.write_text(json.dumps(tokenizer))
    config = EngineConfig(num_blocks=50, block_size=4)
    with pytest.raises(ValueError, match="another tokenizer"):
        InferenceEngine(str(tmp_path / "target"), config, speculative="draft", draft_model=str(tmp_path / "other"))
    with InferenceEngine(str(tmp_path / "target"), config, speculative="draft", draft_model=str(tmp_path / "target")) as same:
        assert same.speculative_method == "draft"
        assert same.generate("hello", SamplingParams(max_tokens=5)).text is not None
