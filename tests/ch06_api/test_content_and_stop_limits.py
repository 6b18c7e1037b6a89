"""Chat content as OpenAI's list of text parts; other part types and oversized stop strings get a clear 400.

Stop strings are capped (count and length) because the engine holds back
any tail that could still grow into one: the work per token grows with the
square of a stop string's length, on the one engine thread.
"""

import httpx
import openai
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from server_helpers import MODEL

from miniyaie.engine import InvalidRequestError, SamplingParams
from miniyaie.engine.sampling_params import MAX_STOP_STRING_LENGTH, MAX_STOP_STRINGS

pytestmark = [pytest.mark.task(f"6.{n}") for n in range(1, 9)]  # end to end, but for own marks


def text_parts(texts):
    return [{"type": "text", "text": t} for t in texts]


@pytest.mark.ungraded
@settings(max_examples=30, deadline=None)
@given(st.lists(st.text(max_size=12), min_size=1, max_size=4))
@example(["hello ", "engine"])
@example([""])
def test_text_parts_are_the_content_they_join_to(served, texts):
    engine, _ = served
    as_parts = engine.render_chat([{"role": "user", "content": text_parts(texts)}])
    assert as_parts == engine.render_chat([{"role": "user", "content": "\n".join(texts)}])


def test_the_openai_client_can_send_text_parts(served, client):
    parts = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": text_parts(["hello", "engine"])}],
                                           max_tokens=6, temperature=0, extra_body={"ignore_eos": True})
    joined = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hello\nengine"}],
                                            max_tokens=6, temperature=0, extra_body={"ignore_eos": True})
    assert parts.choices[0].message.content == joined.choices[0].message.content
    assert parts.usage.prompt_tokens == joined.usage.prompt_tokens


OTHER_PARTS = {
    "image_url": {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
    "input_audio": {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}},
    "no type": {"text": "hi"},
}


@pytest.mark.parametrize("kind", OTHER_PARTS, ids=list(OTHER_PARTS))
def test_other_content_parts_are_refused_by_name(served, client, kind):
    engine, _ = served
    before = engine.get_stats()["requests"]["finished"]
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=MODEL, max_tokens=2,
                                       messages=[{"role": "user", "content": [*text_parts(["look:"]), OTHER_PARTS[kind]]}])
    error = refused.value.body
    assert error["param"] == "messages.0.content", error
    assert (repr(kind) if kind != "no type" else "no type") in error["message"] and "[1]" in error["message"], error
    assert "text parts only" in error["message"]
    assert engine.get_stats()["requests"]["finished"] == before


def test_a_text_part_needs_its_text(served):
    _, server = served
    body = {"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": [{"type": "text"}]}]}
    reply = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=30)
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "messages.0.content"


# ---------------------------------------------------------------- stop strings: count and length
@pytest.mark.ungraded
def test_stop_strings_are_capped_in_count_and_length():
    longest = "x" * MAX_STOP_STRING_LENGTH
    assert SamplingParams(stop=[longest] * MAX_STOP_STRINGS).stop == (longest,) * MAX_STOP_STRINGS  # at the limits
    for stop, said in (([longest + "x"], f"{MAX_STOP_STRING_LENGTH + 1} characters"),
                       (["x" * 100_000], "100000 characters"),
                       (["a"] * (MAX_STOP_STRINGS + 1), f"{MAX_STOP_STRINGS + 1} strings"),
                       ([""], "empty")):
        with pytest.raises(InvalidRequestError) as refused:
            SamplingParams(stop=stop)
        message = str(refused.value)
        assert f"at most {MAX_STOP_STRINGS} strings" in message and f"{MAX_STOP_STRING_LENGTH} characters" in message
        assert said in message and len(message) < 200, "the message states the limit, without echoing the strings"


@pytest.mark.ungraded
def test_the_engine_refuses_an_oversized_stop_string(served):
    engine, _ = served
    with pytest.raises(InvalidRequestError, match=str(MAX_STOP_STRING_LENGTH)):
        engine.generate("hello", max_tokens=2, stop="x" * (MAX_STOP_STRING_LENGTH + 1))


@pytest.mark.parametrize("stop,param", [("x" * (MAX_STOP_STRING_LENGTH + 1), "stop"),
                                        (["fine", "x" * (MAX_STOP_STRING_LENGTH + 1)], "stop.1"),
                                        ([""], "stop.0")], ids=["a string", "one in a list", "an empty one"])
def test_the_server_names_the_oversized_stop_string(served, stop, param):
    _, server = served
    reply = httpx.post(f"{server.url}/v1/completions", timeout=30,
                       json={"model": MODEL, "prompt": "hi", "max_tokens": 2, "stop": stop})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == param, error
    if stop != [""]:
        assert str(MAX_STOP_STRING_LENGTH) in error["message"], error["message"]
