"""`miniyaie serve` in a subprocess, as a user starts it, takes response_format from the real `openai` client."""

import json
import subprocess
import sys
import time

import jsonschema
import pytest

SCHEMA = {"type": "object", "required": ["city", "days"], "properties": {
    "city": {"type": "string", "enum": ["Paris", "Zürich"]}, "days": {"type": "integer"},
    "note": {"type": "string", "maxLength": 10}}}


@pytest.fixture(scope="module")
def served_cli(tmp_path_factory):
    import openai
    from tiny_tokenizer import save_tiny_chat_model

    from miniyaie.serving.server import bind

    directory = tmp_path_factory.mktemp("tiny-chat-serve")
    save_tiny_chat_model(directory)
    sock = bind()  # a free port, handed over to the server
    port = sock.getsockname()[1]
    sock.close()
    log_path = directory / "serve.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen([sys.executable, "-m", "miniyaie", "serve", "--model", str(directory), "--port", str(port),
                                    "--served-model-name", "tiny", "--log-level", "warning", "--device", "cpu"],
                                   stdout=log, stderr=subprocess.STDOUT)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=120)
        deadline = time.monotonic() + 120
        while True:
            try:
                client.models.list()
                break
            except openai.APIConnectionError:
                assert process.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, f"miniyaie serve did not come up: {log_path.read_text()}"
                time.sleep(0.2)
        yield client
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.mark.task("8.7")
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_response_format_json_schema_through_miniyaie_serve(served_cli, temperature):
    reply = served_cli.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Plan a trip as JSON."}], max_tokens=90,
        temperature=temperature, seed=5,
        response_format={"type": "json_schema", "json_schema": {"name": "trip", "schema": SCHEMA, "strict": True}})
    choice = reply.choices[0]
    assert choice.finish_reason == "stop", f"cut at 90 tokens: {choice.message.content!r}"
    jsonschema.validate(json.loads(choice.message.content), SCHEMA)


@pytest.mark.task("8.7")
def test_a_bad_schema_through_miniyaie_serve_is_a_400_and_the_server_serves_on(served_cli):
    import openai

    with pytest.raises(openai.BadRequestError, match="'format'"):
        served_cli.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=5,
            response_format={"type": "json_schema", "json_schema": {"name": "d", "schema": {"type": "string", "format": "date"}}})
    reply = served_cli.completions.create(model="tiny", prompt="still serving", max_tokens=3, extra_body={"ignore_eos": True})
    assert reply.usage.completion_tokens == 3
