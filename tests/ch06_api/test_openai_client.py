"""The real `openai` client against a live server: completions, chat, streaming, usage.

Greedy output must equal transformers' own greedy generate, token for token.
"""

import pytest
from server_helpers import MODEL
from tiny_models import transformers_greedy

pytestmark = [pytest.mark.task(f"6.{n}") for n in range(1, 9)]  # end to end, but for own marks

PROMPT = "Once upon a time there was a small engine that"
MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hello engine"}]


def greedy_text(engine, hf_model, ids, n):
    return engine.tokenizer.decode(transformers_greedy(hf_model, ids, n), skip_special_tokens=True)


@pytest.mark.task("6.6")
def test_completion_is_the_greedy_continuation(served, client, tiny_dir):
    engine, _ = served
    ids = engine.tokenizer(PROMPT)["input_ids"]
    reply = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=9, temperature=0, extra_body={"ignore_eos": True})
    assert reply.object == "text_completion" and reply.model == MODEL
    assert reply.choices[0].text == greedy_text(engine, tiny_dir[1], ids, 9)
    assert reply.choices[0].finish_reason == "length"
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (len(ids), 9)
    assert reply.usage.total_tokens == len(ids) + 9


@pytest.mark.task("6.5")
def test_chat_is_the_greedy_answer_and_reports_cached_prompt_tokens(served, client, tiny_dir):
    engine, _ = served
    _, ids = engine.render_chat(MESSAGES)
    first = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=7, temperature=0,
                                           extra_body={"ignore_eos": True})
    assert first.choices[0].message.role == "assistant"
    assert first.choices[0].message.content == greedy_text(engine, tiny_dir[1], ids, 7)
    assert first.usage.completion_tokens == 7 and first.usage.prompt_tokens == len(ids)
    again = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_completion_tokens=7, temperature=0,
                                           extra_body={"ignore_eos": True})
    assert again.choices[0].message.content == first.choices[0].message.content
    # the prefix cache serves the repeated prompt's whole blocks (block size 4; the last token is recomputed)
    assert len(ids) - 4 <= again.usage.prompt_tokens_details.cached_tokens < len(ids)


@pytest.mark.task("6.6")
def test_stop_strings_and_n_reach_the_engine(served, client):
    whole = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=12, temperature=0, extra_body={"ignore_eos": True})
    text = whole.choices[0].text
    stop = text[3:5]
    assert stop and stop not in text[:3]
    cut = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=12, temperature=0, stop=[stop])
    assert cut.choices[0].text == text[: text.index(stop)] and cut.choices[0].finish_reason == "stop"
    long_stop = text[3:] + " and a stop string longer than the sixteen allowed stop strings"
    one = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=12, temperature=0, stop=long_stop,
                                    extra_body={"ignore_eos": True})
    assert one.choices[0].text == text and one.choices[0].finish_reason == "length"
    several = client.completions.create(model=MODEL, prompt=[PROMPT, "hello"], n=2, max_tokens=3, temperature=0,
                                        extra_body={"ignore_eos": True})
    assert [c.index for c in several.choices] == [0, 1, 2, 3]
    assert several.choices[0].text == several.choices[1].text == whole.choices[0].text[: len(several.choices[0].text)]
    assert several.usage.completion_tokens == 4 * 3


@pytest.mark.task("6.6")
def test_max_tokens_must_fit_the_context_left_by_the_prompt(served, client):
    import openai

    engine, _ = served
    ids = engine.tokenizer(PROMPT)["input_ids"]
    room = engine.context_length - len(ids)
    fits = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=room, temperature=0, extra_body={"ignore_eos": True})
    assert fits.usage.completion_tokens == room
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=room + 1)
    assert refused.value.body["param"] == "max_tokens" and refused.value.body["code"] == "context_length_exceeded"
    too_long = list(range(5, 5 + engine.context_length))  # token ids: a prompt that fills the whole context
    with pytest.raises(openai.BadRequestError) as full:
        client.completions.create(model=MODEL, prompt=too_long, max_tokens=1)
    assert full.value.body["code"] == "context_length_exceeded"
    # no max_tokens: the default is cut to the room left, so a long prompt still gets an answer
    nearly = too_long[: engine.context_length - 3]
    short = client.completions.create(model=MODEL, prompt=nearly, temperature=0, extra_body={"ignore_eos": True})
    assert short.usage.completion_tokens == 3 and short.choices[0].finish_reason == "length"


@pytest.mark.task("6.7")
def test_streamed_chat_reassembles_to_the_non_streamed_text(served, client):
    whole = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=10, temperature=0,
                                           extra_body={"ignore_eos": True})
    chunks = list(client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=10, temperature=0, stream=True,
                                                 stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == whole.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 10
    assert len({c.id for c in chunks}) == 1


@pytest.mark.task("6.7")
def test_streamed_completion_reassembles_to_the_non_streamed_text(served, client):
    whole = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=10, temperature=0, extra_body={"ignore_eos": True})
    chunks = list(client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=10, temperature=0, stream=True,
                                            extra_body={"ignore_eos": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    assert chunks[-1].choices[0].finish_reason == "length"
    assert all(c.usage is None for c in chunks)  # no include_usage: no usage chunk


def test_models_health_and_stats(served, client):
    engine, server = served
    import httpx

    assert [m.id for m in client.models.list().data] == [MODEL]
    assert httpx.get(f"{server.url}/health").json()["status"] == "ok"
    stats = httpx.get(f"{server.url}/stats").json()
    assert stats["kv_blocks"]["total"] == engine.get_stats()["kv_blocks"]["total"]
