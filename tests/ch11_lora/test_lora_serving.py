"""Chapter 11 through the HTTP server: a request's `model` picks its LoRA adapter, /v1/models lists them.

A tiny chat model (byte-level tokenizer, chat template) with two peft adapters behind a live loopback
server; the `openai` client asks for the base model and each adapter, concurrently, and every greedy
answer must equal transformers' generate on peft's model with that adapter merged (the base model's
own for the base name). An unknown model is a 404 in OpenAI's shape; /stats and /metrics count loads.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

for folder in ("ch00_model", "ch05_engine", "ch06_api"):
    path = str(Path(__file__).resolve().parents[1] / folder)
    if path not in sys.path:
        sys.path.append(path)

from lora_models import ADAPTERS, peft_merged, save_peft_adapter  # noqa: E402
from server_helpers import wait_until_idle  # noqa: E402
from tiny_models import transformers_greedy  # noqa: E402

pytestmark = [pytest.mark.task(f"11.{n}") for n in range(1, 6)]  # end to end, but for own marks

BASE = "tiny"
SERVED = ("all-r8", "qv-r2")  # different ranks and targets: a mix-up shows
PROMPT = "Once upon a time there was a small engine that"
MAX_TOKENS = 8


class Served:
    """The tiny chat model, its adapters, peft's merged models, and an engine + server over them (max_loras=1)."""

    def __init__(self, folder: Path):
        from tiny_tokenizer import save_tiny_chat_model

        from miniyaie.api import ServerSettings, create_app
        from miniyaie.engine import EngineConfig, InferenceEngine
        from miniyaie.serving.server import BackgroundServer

        self.base_dir = folder / "base"
        self.base_dir.mkdir()
        self.base = save_tiny_chat_model(self.base_dir)
        self.adapter_dirs = {}
        for seed, name in enumerate(SERVED, start=1):
            self.adapter_dirs[name] = folder / name
            save_peft_adapter(self.base, self.adapter_dirs[name], seed, **ADAPTERS[name])
        self.models = {BASE: self.base, **{n: peft_merged(self.base, d) for n, d in self.adapter_dirs.items()}}
        # one slot for two adapters: requests for both at once take turns, an adapter is evicted and loaded again
        config = EngineConfig(block_size=4, num_blocks=256, max_num_batched_tokens=64,
                              lora_adapters={n: str(d) for n, d in self.adapter_dirs.items()}, max_loras=1)
        self.engine = InferenceEngine(str(self.base_dir), config)
        self.server = BackgroundServer(create_app(self.engine, ServerSettings(served_model_names=(BASE,)))).__enter__()

    def greedy_text(self, model: str, ids: list[int]) -> str:
        return self.engine.tokenizer.decode(transformers_greedy(self.models[model], ids, MAX_TOKENS),
                                            skip_special_tokens=True)

    def close(self) -> None:
        self.server.__exit__(None, None, None)
        self.engine.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    setup = Served(tmp_path_factory.mktemp("lora-served"))
    yield setup
    setup.close()


@pytest.fixture(scope="module")
def client(served):
    import openai

    return openai.OpenAI(base_url=f"{served.server.url}/v1", api_key="unused", max_retries=0, timeout=120)


def test_models_lists_the_base_model_and_each_adapter_with_its_parent(served):
    import httpx

    body = httpx.get(f"{served.server.url}/v1/models", timeout=30).json()
    assert body["object"] == "list"
    listed = {m["id"]: m for m in body["data"]}
    assert list(listed) == [BASE, *SERVED], "the base model first, then the adapters in the order they were given"
    assert all(m["object"] == "model" for m in listed.values())
    assert listed[BASE].get("parent") is None, "the base model has no parent"
    assert [listed[name]["parent"] for name in SERVED] == [BASE] * len(SERVED), "an adapter's parent is the base model"


def test_each_model_name_answers_with_its_adapter_all_at_once(served, client):
    ids = served.engine.tokenizer(PROMPT)["input_ids"]
    # every name twice, all in flight together: the engine mixes them in its batches and takes turns for its one slot
    order = [BASE, *SERVED, *SERVED, BASE]
    answers: dict[int, str] = {}

    def ask(i: int, model: str) -> None:
        reply = client.completions.create(model=model, prompt=PROMPT, max_tokens=MAX_TOKENS, temperature=0,
                                          extra_body={"ignore_eos": True})
        assert reply.model == model
        answers[i] = reply.choices[0].text

    threads = [threading.Thread(target=ask, args=(i, m)) for i, m in enumerate(order)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=90)
    assert sorted(answers) == list(range(len(order))), "every request was answered"
    want = {m: served.greedy_text(m, ids) for m in (BASE, *SERVED)}
    for i, model in enumerate(order):
        other = [m for m, text in want.items() if text == answers[i]]
        assert answers[i] == want[model], (f"request {i} for {model!r}: not the greedy answer of its model"
                                           + (f" but {other[0]!r}'s" if other else ""))
    assert len(set(want.values())) == 3, "the three models answer differently"
    stats = wait_until_idle(served.engine)["lora"]
    assert stats["loads"] >= 2 and stats["evictions"] >= 1, f"one slot, two adapters: loads and an eviction, got {stats}"


def test_chat_with_an_adapter_is_its_greedy_answer(served, client):
    messages = [{"role": "user", "content": "hello engine"}]
    _, ids = served.engine.render_chat(messages)
    for model in (SERVED[1], BASE):
        reply = client.chat.completions.create(model=model, messages=messages, max_tokens=MAX_TOKENS, temperature=0,
                                               extra_body={"ignore_eos": True})
        assert reply.model == model
        assert reply.choices[0].message.content == served.greedy_text(model, ids), f"chat with {model!r}"


def test_an_unknown_model_is_a_404_in_openais_shape_and_the_server_goes_on(served, client):
    import httpx
    import openai

    response = httpx.post(f"{served.server.url}/v1/completions", json={"model": "no-such-lora", "prompt": "hi"}, timeout=30)
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["param"] == "model" and error["type"] == "not_found_error" and error["code"] == "model_not_found"
    assert "no-such-lora" in error["message"] and all(name in error["message"] for name in (BASE, *SERVED)), \
        "the message names the model asked for and what is served"
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-lora", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    reply = client.completions.create(model=SERVED[0], prompt="hi", max_tokens=2, extra_body={"ignore_eos": True})
    assert reply.usage.completion_tokens == 2


def test_stats_and_metrics_count_adapter_loads_and_requests(served, client):
    import httpx

    for model in SERVED:
        client.completions.create(model=model, prompt="count me", max_tokens=2, extra_body={"ignore_eos": True})
    wait_until_idle(served.engine)
    stats = httpx.get(f"{served.server.url}/stats", timeout=30).json()["lora"]
    assert stats["loads"] >= 2 and len(stats["resident"]) <= 1
    assert all(stats["requests"][name] >= 1 for name in SERVED)
    text = httpx.get(f"{served.server.url}/metrics", timeout=30).text
    samples = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("miniyaie_lora_")}
    assert samples["miniyaie_lora_loads_total"] == stats["loads"]
    assert samples["miniyaie_lora_evictions_total"] == stats["evictions"]
    assert samples["miniyaie_lora_resident_adapters"] == len(stats["resident"])
    assert samples["miniyaie_lora_max_adapters"] == 1
    for name in SERVED:
        assert samples[f'miniyaie_lora_requests_total{{adapter="{name}"}}'] == stats["requests"][name]


def test_an_adapter_named_like_the_base_model_is_refused(served):
    from miniyaie.api import ServerSettings, create_app
    from miniyaie.engine import EngineError

    with pytest.raises(EngineError, match="all-r8.*base model's served name"):
        create_app(served.engine, ServerSettings(served_model_names=("all-r8",)))


def test_miniyaie_serve_lora_flags_serve_each_adapter_by_name(served, tmp_path):
    import os
    import subprocess

    from miniyaie.bench.serve_peers import wait_until_up

    import openai

    from miniyaie.serving.server import bind

    sock = bind()  # a free port, handed over
    port = sock.getsockname()[1]
    sock.close()
    log = open(tmp_path / "serve.log", "w+")
    config = tmp_path / "serve.yaml"  # the settings file's adapters, and one more from the command line
    config.write_text(f"engine:\n  lora_adapters:\n    {SERVED[0]}: {served.adapter_dirs[SERVED[0]]}\n  max_loras: 2\n")
    command = [sys.executable, "-m", "miniyaie", "serve", "--model", str(served.base_dir), "--port", str(port),
               "--served-model-name", BASE, "--log-level", "warning", "--device", "cpu", "--config", str(config),
               "--lora", f"{SERVED[1]}={served.adapter_dirs[SERVED[1]]}", "--max-lora-rank", "8"]
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=60)
        wait_until_up(f"http://127.0.0.1:{port}", process, tmp_path / "serve.log", timeout=50)
        models = client.models.list()
        assert [m.id for m in models.data] == [BASE, *SERVED]
        ids = served.engine.tokenizer(PROMPT)["input_ids"]
        for model in SERVED:
            reply = client.completions.create(model=model, prompt=PROMPT, max_tokens=MAX_TOKENS, temperature=0,
                                              extra_body={"ignore_eos": True})
            assert reply.choices[0].text == served.greedy_text(model, ids), f"miniyaie serve's {model!r}"
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.mark.ungraded  # the CLI's flags: provided code, they pass on the stubs too
@pytest.mark.parametrize("flags,says", [
    (["--lora", "no-equals-sign"], "NAME=PATH"),
    (["--lora", "=/some/dir"], "NAME=PATH"),
    (["--lora", "a=/one", "--lora", "a=/two"], "'a' is already given"),
    (["--max-loras", "0"], "at least 1"),
], ids=["no equals sign", "no name", "a name twice", "max-loras 0"])
def test_bad_lora_flags_are_one_line_and_status_2(flags, says, capsys):
    from miniyaie.cli.main import main

    assert main(["generate", "hi", "--device", "cpu", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err, err


def test_generate_with_an_adapter_and_an_unknown_one(served, capsys):
    from miniyaie.cli.main import main

    model = SERVED[1]
    flags = ["--model", str(served.base_dir), "--device", "cpu", "--lora", f"{model}={served.adapter_dirs[model]}",
             "--temperature", "0", "--max-tokens", str(MAX_TOKENS)]
    assert main(["generate", PROMPT, *flags, "--adapter", model]) == 0
    ids = served.engine.tokenizer(PROMPT)["input_ids"]
    tokens = transformers_greedy(served.models[model], ids, MAX_TOKENS)
    eos = set(served.engine.eos_token_ids)
    tokens = tokens[: next((i for i, t in enumerate(tokens) if t in eos), len(tokens))]  # the CLI stops at EOS
    assert capsys.readouterr().out == PROMPT + served.engine.tokenizer.decode(tokens, skip_special_tokens=True) + "\n"
    assert main(["generate", PROMPT, *flags, "--adapter", "no-such-lora"]) == 2
    err = capsys.readouterr().err
    assert "no-such-lora" in err and model in err, "the error names the adapter asked for and the ones served"
