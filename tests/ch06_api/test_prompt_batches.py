"""Task 6.6: /v1/completions with a batch of prompts: every prompt checked first, then all run together.

Through the live server with a tiny random model; the oracle is transformers'
greedy generate. The engine's step trace (LLMEngine.on_step) shows which
prompts shared a step, and its counters show that a refused batch ran nothing.
"""

import httpx
import pytest
from server_helpers import MODEL
from tiny_models import transformers_greedy

PROMPTS = ["Once upon a time", "hello engine", "the cache", "a fourth prompt"]


def post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", json=body, timeout=60)


def greedy_text(engine, hf_model, prompt, n):
    ids = engine.encode(prompt) if isinstance(prompt, str) else prompt
    return engine.tokenizer.decode(transformers_greedy(hf_model, ids, n), skip_special_tokens=True)


@pytest.fixture
def steps(served):
    """The number of sequences in every engine step while the test runs."""
    engine, _ = served
    seen: list[int] = []
    engine.llm.on_step = lambda record: seen.append(record.num_seqs)
    yield seen
    engine.llm.on_step = None


@pytest.mark.task("6.6")
def test_a_batch_answers_every_prompt_in_order_and_its_prompts_run_together(served, tiny_dir, steps):
    engine, server = served
    prompts = PROMPTS
    body = {"model": MODEL, "prompt": prompts, "max_tokens": 8, "n": 2, "temperature": 0, "ignore_eos": True}
    reply = post(server, "/v1/completions", body)
    assert reply.status_code == 200, reply.text
    choices = reply.json()["choices"]
    assert [c["index"] for c in choices] == list(range(8)), "choice index = prompt index * n + completion index, in order"
    for p, prompt in enumerate(prompts):
        expected = greedy_text(engine, tiny_dir[1], prompt, 8)
        for c in choices[2 * p : 2 * p + 2]:
            assert c["text"] == expected, f"choice {c['index']} belongs to prompt {p} ({prompt!r}): {c['text']!r} != {expected!r}"
    usage = reply.json()["usage"]
    assert usage["completion_tokens"] == 8 * 8
    assert usage["prompt_tokens"] == sum(len(engine.encode(p)) for p in prompts)
    assert max(steps, default=0) >= 8, (
        f"at most {max(steps, default=0)} sequences ever shared a step: the 4 prompts x n=2 must run together "
        "(submit them all, then wait for all; awaiting one answer before starting the next runs them one by one)")


@pytest.mark.task("6.6")
@pytest.mark.parametrize("bad, max_tokens, why", [
    ("x " * 600, 2, "the last prompt is longer than the context"),
    ("y " * 60, 40, "the last prompt leaves less room than max_tokens"),
])
def test_one_bad_prompt_refuses_the_whole_batch_before_any_runs(served, bad, max_tokens, why):
    engine, server = served
    before = engine.get_stats()["tokens"]["prompt"]
    reply = post(server, "/v1/completions", {"model": MODEL, "prompt": ["fine", "also fine", bad], "max_tokens": max_tokens})
    assert reply.status_code == 400, f"{why}: expected 400, got {reply.status_code} {reply.text}"
    assert reply.json()["error"]["type"] == "invalid_request_error"
    after = engine.get_stats()["tokens"]["prompt"]
    assert after == before, (
        f"the batch was refused ({why}), but {after - before} prompt tokens reached the engine: check every prompt "
        "before submitting any")
