"""Fields a request leaves out: the operator's choice, else the model's generation_config.json, else OpenAI's.

OpenAI samples at temperature 1 when a request gives none; vLLM first uses
the model authors' recommendation from generation_config.json. A seeded
request draws the same tokens whatever else runs, so "omitted" and
"explicit" can be compared token for token.
"""

import shutil

import openai
import pytest
from server_helpers import MODEL, start_server

from miniyaie.engine import ModelLoadError
from miniyaie.engine.sampling_params import generation_config_defaults

pytestmark = [pytest.mark.task(f"6.{n}") for n in range(1, 9)]  # end to end, but for own marks
PROMPT = "Once upon a time there was a small engine that"
SEEDS = range(6)


def texts(client, **fields) -> list[str]:
    """Completion 0's text for each seed (12 tokens, never stopping early)."""
    fields = dict(fields)
    extra = {"ignore_eos": True, **({"top_k": fields.pop("top_k")} if "top_k" in fields else {})}  # not in OpenAI's API
    return [client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=12, seed=seed, extra_body=extra,
                                      **fields).choices[0].text for seed in SEEDS]


def test_an_omitted_temperature_is_openais_default_of_one(served, client):
    greedy = texts(client, temperature=0)
    omitted = texts(client)
    assert omitted == texts(client, temperature=1.0), "no temperature and no model default: OpenAI's 1"
    assert omitted != greedy, "an omitted temperature must sample, not decode greedily"


@pytest.fixture(scope="module")
def opinionated_dir(tiny_dir, tmp_path_factory):
    """The tiny model, whose generation_config.json recommends temperature 0.5 and top_k 3."""
    directory = tmp_path_factory.mktemp("tiny-with-sampling-defaults")
    shutil.copytree(tiny_dir[0], directory, dirs_exist_ok=True)
    config = (directory / "generation_config.json").read_text().rstrip("}\n ")
    (directory / "generation_config.json").write_text(config + ', "temperature": 0.5, "top_k": 3, "do_sample": true}')
    return directory


@pytest.fixture(scope="module")
def opinionated_loaded(opinionated_dir):
    from miniyaie.model import load

    return load(str(opinionated_dir))


def serve_and_ask(loaded, asks: dict[str, dict], **settings) -> dict[str, list[str]]:
    engine, server = start_server(loaded, **settings)
    try:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)
        return {name: texts(client, **fields) for name, fields in asks.items()}
    finally:
        server.__exit__(None, None, None)
        engine.close()


def test_the_models_generation_config_fills_what_a_request_leaves_out(opinionated_loaded):
    got = serve_and_ask(opinionated_loaded, {
        "omitted": {}, "as the model says": {"temperature": 0.5, "top_k": 3}, "hotter": {"temperature": 1.0, "top_k": 3},
        "greedy": {"temperature": 0}})
    assert got["omitted"] == got["as the model says"], "the model's temperature 0.5 and top_k 3 apply"
    assert got["omitted"] != got["hotter"], "the model's temperature, not OpenAI's 1"
    assert got["greedy"] == [got["greedy"][0]] * len(SEEDS), "a request's own temperature wins over the model's"


def test_the_operators_defaults_win_over_the_models(opinionated_loaded):
    got = serve_and_ask(opinionated_loaded, {"omitted": {}, "greedy": {"temperature": 0}},
                        sampling_defaults={"temperature": 0.0})
    assert got["omitted"] == got["greedy"]


@pytest.mark.ungraded
def test_generation_config_defaults_reads_only_what_the_file_sets(opinionated_dir, tiny_dir, tmp_path):
    assert generation_config_defaults(opinionated_dir) == {"temperature": 0.5, "top_k": 3}
    assert generation_config_defaults(tiny_dir[0]) == {}, "no sampling keys in the file: no opinion"
    assert generation_config_defaults(tmp_path) == {}, "no file: no opinion"
    (tmp_path / "generation_config.json").write_text('{"temperature": -1}')
    with pytest.raises(ModelLoadError, match="generation_config.json.*temperature"):
        generation_config_defaults(tmp_path)
