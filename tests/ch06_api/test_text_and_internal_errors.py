"""Text that is not valid Unicode gets a 400 naming the field; an error nobody expected gets an OpenAI 500 and a log.

JSON can carry half of a surrogate pair ("a\\ud800b" is valid JSON); no
tokenizer can encode it. A chat template may refuse a conversation on
purpose (`raise_exception`): the client's fault, a 400. Anything else that
raises is the server's fault: a 500 that OpenAI clients can still parse,
with the traceback in the server's log.
"""

import json
import logging

import httpx
import openai
import pytest
from server_helpers import MODEL, start_server, wait_until_idle

from miniyaie.engine import InvalidRequestError

pytestmark = [pytest.mark.task(f"6.{n}") for n in range(1, 9)]  # end to end, but for own marks
LONE = "a\ud800b"  # json.dumps writes it as the valid JSON escape "a\\ud800b"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
COMPLETION = {"model": MODEL, "prompt": "hi", "max_tokens": 2}

LONE_SURROGATES = {
    "chat content": ("/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": LONE}]}, "messages.0.content"),
    "a text part": ("/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "fine"}, {"type": "text", "text": LONE}]}]}, "messages.0.content"),
    "a message name": ("/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": "hi", "name": LONE}]},
                       "messages.0.name"),
    "a prompt": ("/v1/completions", {**COMPLETION, "prompt": LONE}, "prompt"),
    "a prompt in a batch": ("/v1/completions", {**COMPLETION, "prompt": ["fine", LONE]}, "prompt.1"),
    "a stop string": ("/v1/completions", {**COMPLETION, "stop": ["fine", LONE]}, "stop.1"),
    "the model name": ("/v1/completions", {**COMPLETION, "model": LONE}, "model"),
}


def post(server, path: str, body: dict) -> httpx.Response:
    raw = json.dumps(body).encode()  # ASCII: the surrogate travels as a JSON escape, which is valid UTF-8
    return httpx.post(f"{server.url}{path}", content=raw, headers={"content-type": "application/json"}, timeout=30)


@pytest.mark.parametrize("case", LONE_SURROGATES, ids=list(LONE_SURROGATES))
def test_text_that_is_not_valid_unicode_is_refused_with_the_field_named(served, case):
    engine, server = served
    path, body, param = LONE_SURROGATES[case]
    before = engine.get_stats()["requests"]["finished"]
    reply = post(server, path, body)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param, error
    assert "not valid Unicode" in error["message"] and "\\ud800" in error["message"], error["message"]
    assert wait_until_idle(engine)["requests"]["finished"] == before, "nothing may be submitted"


@pytest.mark.ungraded
def test_the_engine_refuses_a_chat_message_that_is_not_valid_unicode(served):
    engine, _ = served
    with pytest.raises(InvalidRequestError, match="messages\\[0\\].content is not valid Unicode"):
        engine.render_chat([{"role": "user", "content": LONE}])


class Exploding:
    """An adapter with a bug: every hook raises an exception that no handler expects."""

    def prepare_prompt(self, prompt):
        raise RuntimeError("adapter bug")

    def prepare_messages(self, messages):
        raise RuntimeError("adapter bug")

    def process_output(self, output):
        return output


def test_an_unexpected_error_is_an_openai_500_with_the_traceback_logged(tiny_loaded, caplog):
    engine, server = start_server(tiny_loaded, num_blocks=64, adapters=[Exploding()])
    try:
        for path, body in (("/v1/chat/completions", CHAT), ("/v1/completions", COMPLETION)):
            caplog.clear()
            with caplog.at_level(logging.ERROR, logger="miniyaie.api"):
                reply = post(server, path, body)
            assert reply.status_code == 500 and reply.headers["content-type"] == "application/json", reply.text
            error = reply.json()["error"]
            assert set(error) == {"message", "type", "param", "code"}
            assert error["type"] == "server_error" and error["code"] == "internal_error"
            assert "RuntimeError" in error["message"] and "adapter bug" not in error["message"], "no internals leak"
            logged = [r for r in caplog.records if r.name == "miniyaie.api" and r.exc_info]
            assert logged and logged[0].exc_info[0] is RuntimeError, "the traceback must be in the server's log"
            assert path in logged[0].getMessage()
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.InternalServerError) as raised:
            client.chat.completions.create(**CHAT)
        assert raised.value.body["code"] == "internal_error"
        counted = httpx.get(f"{server.url}/metrics").text
        assert 'miniyaie_http_requests_total{endpoint="/v1/chat/completions",status="500"} 2.0' in counted
        assert httpx.get(f"{server.url}/health").json()["status"] == "ok"
        assert wait_until_idle(engine)["kv_blocks"]["held_by_requests"] == 0
    finally:
        server.__exit__(None, None, None)
        engine.close()


NO_SYSTEM_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_a_chat_template_that_refuses_the_messages_is_a_400(tiny_loaded, tiny_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_dir[0])
    tokenizer.chat_template = NO_SYSTEM_TEMPLATE
    loaded = type(tiny_loaded)(tiny_loaded.model, tokenizer, tiny_loaded.eos_token_ids, tiny_loaded.path)
    engine, server = start_server(loaded, num_blocks=64)
    try:
        system = {**CHAT, "messages": [{"role": "system", "content": "be terse"}, *CHAT["messages"]]}
        reply = post(server, "/v1/chat/completions", system)
        assert reply.status_code == 400, reply.text
        error = reply.json()["error"]
        assert error["param"] == "messages" and "System role not supported" in error["message"], error
        assert post(server, "/v1/chat/completions", CHAT).status_code == 200, "a conversation the template accepts"
    finally:
        server.__exit__(None, None, None)
        engine.close()
