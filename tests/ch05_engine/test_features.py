"""Engine features end to end on the tiny model: n > 1 on forked blocks, seeds, logprobs, stops, adapters."""

import pytest
import torch

from miniyaie.engine import EngineConfig, InferenceEngine, StripOutputAdapter, SystemPromptAdapter

pytestmark = [pytest.mark.task(f"5.{n}") for n in range(1, 18)]  # end to end, but for own marks
PROMPT = "Once upon a time there"  # ends inside a block of 4 tokens (checked below)


def make(tiny_loaded, **config):
    settings = dict(block_size=4, num_blocks=96, max_num_batched_tokens=32)
    return InferenceEngine(tiny_loaded, EngineConfig(**{**settings, **config}))


def test_n_completions_share_the_prompt_blocks(tiny_loaded):
    with make(tiny_loaded, enable_prefix_caching=False) as engine:
        prompt_len = len(engine.tokenizer(PROMPT)["input_ids"])
        assert prompt_len % 4 != 0, "the prompt must end inside a block (copy-on-write is then exercised)"
        single = engine.generate(PROMPT, max_tokens=6, ignore_eos=True)
        before = engine.get_stats()
        result = engine.generate(PROMPT, n=3, max_tokens=6, ignore_eos=True)
        after = engine.get_stats()
    assert [o.index for o in result.outputs] == [0, 1, 2], f"completion indexes {[o.index for o in result.outputs]}"
    for o in result.outputs:  # greedy: every completion is the single request's output
        assert (o.token_ids, o.finish_reason) == (single.token_ids, "length"), (
            f"completion {o.index} gave {o.token_ids} ({o.finish_reason}); alone the prompt gives {single.token_ids}: "
            "a completion that writes into the shared last block must first get its own copy (copy-on-write)")
    assert result.completion_tokens == 18, f"3 completions x 6 tokens, usage says {result.completion_tokens}"
    forked = after["forked_requests"] - before["forked_requests"]
    assert forked == 2, f"{forked} completions forked: the 2 besides the first share its prompt"
    computed = after["tokens"]["computed"] - before["tokens"]["computed"]
    assert computed == prompt_len + 3 * 5, (
        f"{computed} tokens computed: the prompt goes through the model once ({prompt_len}), then 5 decodes each")
    whole = prompt_len // 4  # at most: the prompt's whole blocks once, plus each completion's own blocks
    own = -(-(prompt_len + 6 - 1) // 4) - whole
    assert after["kv_blocks"]["max_used"] <= whole + 3 * own < 3 * (whole + own), (
        f"{after['kv_blocks']['max_used']} blocks at the peak: sharing the prompt's whole blocks needs at most {whole + 3 * own}")
    assert after["kv_blocks"]["held_by_requests"] == 0, "blocks still held after every completion finished"


def test_n_sampled_completions_differ_and_repeat_with_the_seed(tiny_loaded):
    with make(tiny_loaded) as engine:
        a = engine.generate(PROMPT, n=3, max_tokens=8, temperature=1.0, seed=11, ignore_eos=True)
        b = engine.generate(PROMPT, n=3, max_tokens=8, temperature=1.0, seed=11, ignore_eos=True)
        chunks = [c for c in engine.chat_completion_stream([{"role": "user", "content": "hi"}], n=2, max_tokens=3, ignore_eos=True)]
    assert [o.token_ids for o in a.outputs] == [o.token_ids for o in b.outputs]
    assert len({tuple(o.token_ids) for o in a.outputs}) == 3
    assert {c["choices"][0]["index"] for c in chunks[1:]} == {0, 1}


def test_a_seeded_request_is_the_same_whatever_shares_its_batch(tiny_loaded):
    with make(tiny_loaded) as engine:
        alone = engine.generate(PROMPT, max_tokens=10, temperature=1.0, top_k=20, seed=5, ignore_eos=True).token_ids
        batch = engine.generate(
            ["hello", PROMPT, "1, 2, 3,"], max_tokens=10, temperature=1.0, top_k=20, ignore_eos=True
        )  # unseeded batch mates
        again = engine.generate([PROMPT, "hello world"], max_tokens=10, temperature=1.0, top_k=20, seed=5, ignore_eos=True)
    assert again[0].token_ids == alone
    assert len(batch) == 3


def test_logprobs_are_the_models_own(tiny_loaded, tiny_dir):
    _, hf_model = tiny_dir
    with make(tiny_loaded) as engine:
        result = engine.generate(PROMPT, max_tokens=5, ignore_eos=True, logprobs=3)
    ids = result.prompt_token_ids + result.token_ids
    with torch.no_grad():
        logits = hf_model(torch.tensor([ids])).logits[0].float()
    expected = torch.log_softmax(logits, -1)
    assert len(result.logprobs) == 5
    for i, entry in enumerate(result.logprobs):
        row = expected[len(result.prompt_token_ids) - 1 + i]
        assert entry.token_id == result.token_ids[i] == row.argmax().item()  # greedy
        assert entry.logprob == pytest.approx(row[entry.token_id].item(), abs=1e-4)
        assert [t.token_id for t in entry.top_logprobs] == row.topk(3).indices.tolist()


def test_stop_strings_and_stop_tokens_end_the_output(tiny_loaded):
    with make(tiny_loaded) as engine:
        full = engine.generate(PROMPT, max_tokens=24, ignore_eos=True)
        text = full.text
        clean = [i for i in range(2, len(text) - 2) if "\ufffd" not in text[i : i + 2]]
        start = clean[len(clean) // 2]
        stop = text[start : start + 2]
        cut = engine.generate(PROMPT, max_tokens=24, ignore_eos=True, stop=[stop, "never-there"])
        assert cut.text == text[: text.find(stop)] and cut.finish_reason == "stop"
        assert cut.token_ids == full.token_ids[: len(cut.token_ids)] and len(cut.token_ids) < 24
        streamed = "".join(engine.generate_stream(PROMPT, max_tokens=24, ignore_eos=True, stop=stop))
        assert streamed == cut.text
        stop_id = full.token_ids[3]
        by_id = engine.generate(PROMPT, max_tokens=24, ignore_eos=True, stop_token_ids=[stop_id])
        assert by_id.token_ids == full.token_ids[: full.token_ids.index(stop_id) + 1] and by_id.finish_reason == "stop"
        assert engine.get_stats()["kv_blocks"]["held_by_requests"] == 0


def test_min_tokens_holds_back_end_of_sequence(tiny_loaded):
    with make(tiny_loaded) as probe:
        first = probe.generate("hello", max_tokens=1).token_ids[0]
    loaded = type(tiny_loaded)(tiny_loaded.model, tiny_loaded.tokenizer, [first], tiny_loaded.path)
    with make(loaded) as engine:
        assert engine.generate("hello", max_tokens=8).token_ids == [first]
        held = engine.generate("hello", max_tokens=8, min_tokens=3)
    assert len(held.token_ids) >= 3 and first not in held.token_ids[:3]


def test_adapters_rewrite_prompts_and_outputs(tiny_loaded):
    messages = [{"role": "user", "content": "hello"}]
    with make(tiny_loaded) as plain, make(tiny_loaded) as wrapped:
        wrapped.adapters = [SystemPromptAdapter("You are terse."), StripOutputAdapter()]
        prompt, _ = wrapped.render_chat(messages)
        assert prompt == plain.render_chat([{"role": "system", "content": "You are terse."}, *messages])[0]
        assert wrapped.render_chat([{"role": "system", "content": "Own."}, *messages])[0].count("system") == 1
        expected = plain.chat_completion([{"role": "system", "content": "You are terse."}, *messages], max_tokens=8, ignore_eos=True)
        got = wrapped.chat_completion(messages, max_tokens=8, ignore_eos=True)
        assert got["choices"][0]["message"]["content"] == expected["choices"][0]["message"]["content"].strip()
