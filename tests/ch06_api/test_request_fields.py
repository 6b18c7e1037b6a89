"""Task 6.5 at each documented limit, and every requested field arriving through the live server (logprobs, usage)."""

import pytest
from server_helpers import MODEL

from miniyaie.api.errors import APIError
from miniyaie.api.params import sampling_params_for
from miniyaie.api.protocol import ChatCompletionRequest, CompletionRequest
from miniyaie.engine import SamplingParams

pytestmark = [pytest.mark.task(f"6.{n}") for n in range(1, 9)]  # end to end, but for own marks

CONTEXT = 100
DEFAULTS = SamplingParams(max_tokens=16)
PROMPT = "Once upon a time there was a small engine that"


def completion(**fields) -> CompletionRequest:
    return CompletionRequest(model=MODEL, prompt="hi", **fields)


def chat(**fields) -> ChatCompletionRequest:
    return ChatCompletionRequest(model=MODEL, messages=[{"role": "user", "content": "hi"}], **fields)


def refused(request, prompt_tokens) -> APIError:
    """The APIError(400, code context_length_exceeded) that the request must get; fails with what happened instead."""
    expected = f"a prompt of {prompt_tokens} tokens (max_tokens {request.max_tokens}) in a context of {CONTEXT} must be refused"
    try:
        params = sampling_params_for(request, prompt_tokens, CONTEXT, DEFAULTS)
    except APIError as error:
        assert error.status == 400 and error.code == "context_length_exceeded", f"{expected}: got {vars(error)}"
        return error
    except Exception as exc:  # noqa: BLE001 - any other exception is the failure we describe
        pytest.fail(f"{expected} with APIError(400, code='context_length_exceeded'), not {type(exc).__name__}: {exc}")
    pytest.fail(f"{expected}, but it was accepted with max_tokens={params.max_tokens}")


# ---------------------------------------------------------------- 6.5 at its limits
@pytest.mark.task("6.5")
@pytest.mark.parametrize("make,param", [(completion, "prompt"), (chat, "messages")])
def test_a_prompt_must_leave_room_for_one_new_token(make, param):
    params = sampling_params_for(make(), CONTEXT - 1, CONTEXT, DEFAULTS)
    assert params.max_tokens == 1, "a prompt one token short of the context leaves room for exactly one token"
    error = refused(make(), CONTEXT)
    assert error.param == param, f"a prompt that fills the context is the {param!r}'s fault, got {error.param!r}"
    refused(make(), CONTEXT + 5)


@pytest.mark.task("6.5")
@pytest.mark.parametrize("make,field", [(completion, "max_tokens"), (chat, "max_tokens"), (chat, "max_completion_tokens")])
def test_max_tokens_may_fill_the_room_exactly(make, field):
    room = CONTEXT - 30
    got = sampling_params_for(make(**{field: room}), 30, CONTEXT, DEFAULTS).max_tokens
    assert got == room, f"{field}={room} fills the room left by a 30-token prompt exactly: it is kept, got max_tokens={got}"
    error = refused(make(**{field: room + 1}), 30)
    assert error.param == "max_tokens", f"one token too many is max_tokens' fault, got param {error.param!r}"


@pytest.mark.task("6.5")
def test_without_max_tokens_the_default_is_cut_to_the_room_left():
    assert sampling_params_for(completion(), 10, CONTEXT, DEFAULTS).max_tokens == 16, (
        "room for 90 tokens: the server's default of 16 applies (the smaller of the two)"
    )
    assert sampling_params_for(completion(), CONTEXT - 5, CONTEXT, DEFAULTS).max_tokens == 5, (
        "room for 5 tokens: the default of 16 is cut to 5"
    )
    assert sampling_params_for(completion(), CONTEXT - 16, CONTEXT, DEFAULTS).max_tokens == 16


@pytest.mark.task("6.5")
def test_every_field_given_reaches_the_sampling_params_and_the_rest_keep_the_defaults():
    given = dict(temperature=0.7, top_p=0.9, n=2, seed=5, presence_penalty=0.5, frequency_penalty=-0.5, top_k=7,
                 min_p=0.1, repetition_penalty=1.2, min_tokens=2, ignore_eos=True, max_tokens=9, stop=["</a>", "."],
                 stop_token_ids=[3, 9])
    params = sampling_params_for(completion(logprobs=3, **given), 10, CONTEXT, DEFAULTS)
    for name, value in given.items():
        expected = tuple(value) if name in ("stop", "stop_token_ids") else value
        assert getattr(params, name) == pytest.approx(expected), f"{name} was asked for but did not arrive"
    assert params.logprobs == 3, f"logprobs=3 was asked for (a completion's spelling) but params.logprobs is {params.logprobs}"
    assert sampling_params_for(completion(stop="END"), 10, CONTEXT, DEFAULTS).stop == ("END",), "one stop string"
    plain = sampling_params_for(completion(), 10, CONTEXT, DEFAULTS)
    assert plain.with_updates(max_tokens=DEFAULTS.max_tokens) == DEFAULTS, "fields not given keep the server's defaults"
    assert sampling_params_for(chat(logprobs=True, top_logprobs=2), 10, CONTEXT, DEFAULTS).logprobs == 2, (
        "a chat asks for logprobs as logprobs=True, top_logprobs=2: params.logprobs is 2")
    assert sampling_params_for(chat(logprobs=True), 10, CONTEXT, DEFAULTS).logprobs == 0
    assert sampling_params_for(chat(), 10, CONTEXT, DEFAULTS).logprobs is None


# ---------------------------------------------------------------- through the server
@pytest.mark.task("6.6")
def test_completion_logprobs_arrive_for_every_token(served, client):
    reply = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=5, temperature=0, logprobs=2,
                                      extra_body={"ignore_eos": True})
    logprobs = reply.choices[0].logprobs
    assert logprobs is not None, "logprobs were asked for but the reply has none"
    assert len(logprobs.tokens) == len(logprobs.token_logprobs) == len(logprobs.top_logprobs) == 5
    assert all(lp <= 0 for lp in logprobs.token_logprobs), "a log probability above 0"
    # the legacy shape keys alternatives by text: two tokens spelled alike (halves of characters, both
    # U+FFFD in this byte-level vocabulary) share a key, so a step may show fewer than 2 texts, never more
    for i, (token, top) in enumerate(zip(logprobs.tokens, logprobs.top_logprobs)):
        assert 1 <= len(top) <= 2, f"token {i}: {len(top)} top alternatives for logprobs=2"
        assert top.get(token) == pytest.approx(max(top.values())), f"token {i}: greedy chose {token!r}, not the best of {top}"
    assert reply.usage.completion_tokens == 5


@pytest.mark.task("6.5")
def test_chat_logprobs_arrive_for_every_token(served, client):
    reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hello"}], max_tokens=4,
                                           temperature=0, logprobs=True, top_logprobs=3, extra_body={"ignore_eos": True})
    content = reply.choices[0].logprobs.content if reply.choices[0].logprobs else None
    assert content is not None and len(content) == 4, "logprobs were asked for: one entry per generated token"
    assert all(len(entry.top_logprobs) == 3 and entry.logprob <= 0 for entry in content)
    assert (reply.usage.completion_tokens, reply.usage.total_tokens) == (4, reply.usage.prompt_tokens + 4)


@pytest.mark.task("6.7")
def test_streamed_logprobs_and_usage_arrive(served, client):
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hello"}], max_tokens=4, temperature=0, stream=True,
        logprobs=True, top_logprobs=1, stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
    entries = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert len(entries) == 4, f"{len(entries)} streamed logprob entries for 4 tokens"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4, "include_usage asked for a usage chunk"


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_stop_token_ids_end_the_output_through_both_endpoints_and_bad_ones_are_refused(served, client, endpoint):
    """vLLM's servers take stop_token_ids; a token among them ends the output "stop", as it does in the engine."""
    import httpx

    def ask(**extra):
        if endpoint == "completions":
            reply = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, temperature=0,
                                              extra_body={"ignore_eos": True, **extra})
            return reply.choices[0].finish_reason, reply.usage.completion_tokens
        reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": PROMPT}], max_tokens=8,
                                               temperature=0, extra_body={"ignore_eos": True, **extra})
        return reply.choices[0].finish_reason, reply.usage.completion_tokens

    engine = served[0]
    prompt = PROMPT if endpoint == "completions" else engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": PROMPT}], tokenize=False, add_generation_prompt=True)
    tokens = engine.generate(prompt, max_tokens=8, ignore_eos=True).outputs[0].token_ids
    assert ask() == ("length", 8)
    stop = tokens[2]
    want = tokens.index(stop) + 1
    assert ask(stop_token_ids=[stop]) == ("stop", want), f"stop_token_ids=[{stop}]: the output ends at its first {stop}"
    body = {"model": MODEL, "max_tokens": 4, **({"prompt": PROMPT} if endpoint == "completions" else
                                                {"messages": [{"role": "user", "content": PROMPT}]})}
    path = "/v1/completions" if endpoint == "completions" else "/v1/chat/completions"
    for bad in ([-1], ["7"], [True], 7, list(range(65))):
        response = httpx.post(f"{served[1].url}{path}", json={**body, "stop_token_ids": bad}, timeout=60)
        assert response.status_code == 400, f"stop_token_ids={str(bad)[:40]} must be refused with 400, got {response.status_code}"
