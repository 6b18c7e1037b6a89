"""EngineConfig from YAML and TOML files, and the CLI on the engine."""

import pytest
from cli_helpers import assert_clear_error, miniyaie

from miniyaie.engine import EngineConfig, InferenceEngine, InvalidRequestError, SamplingParams
from miniyaie.serving.config_file import load_settings

pytestmark = [pytest.mark.task(f"5.{n}") for n in range(1, 18)]  # end to end, but for own marks

YAML = """
engine:
  model: {model}
  max_num_batched_tokens: 64
  max_num_seqs: 8
  enable_prefix_caching: false
sampling:
  temperature: 0.7
  top_p: 0.95
  max_tokens: 5
  stop: ["\\n\\n"]
resource:
  device: cpu
  dtype: float32
  num_blocks: 40
  block_size: 4
"""
TOML = """
[engine]
model = "{model}"
max_num_batched_tokens = 64
max_num_seqs = 8
enable_prefix_caching = false

[sampling]
temperature = 0.7
top_p = 0.95
max_tokens = 5
stop = ["\\n\\n"]

[resource]
device = "cpu"
dtype = "float32"
num_blocks = 40
block_size = 4
"""


@pytest.mark.parametrize("suffix,template", [(".yaml", YAML), (".toml", TOML)])
def test_yaml_and_toml_give_the_same_settings(tmp_path, suffix, template):
    path = tmp_path / f"engine{suffix}"
    path.write_text(template.format(model="some/model"))
    s = load_settings(path)
    assert s.model == "some/model" and s.device == "cpu" and s.dtype == "float32"
    assert s.engine == EngineConfig(block_size=4, num_blocks=40, max_num_batched_tokens=64, max_num_seqs=8, enable_prefix_caching=False)
    assert s.sampling == SamplingParams(temperature=0.7, top_p=0.95, max_tokens=5, stop=("\n\n",))


@pytest.mark.parametrize(
    "text, words",
    [
        pytest.param("engine:\n  max_num_seqz: 3\n", ["max_num_seqz", "engine"], marks=pytest.mark.ungraded),  # provided checks: pass on the stubs
        pytest.param("sampling:\n  temprature: 0.5\n", ["temprature", "sampling"], marks=pytest.mark.ungraded),
        pytest.param("resources:\n  device: cpu\n", ["resources"], marks=pytest.mark.ungraded),
        ("sampling:\n  top_p: 2\n", ["top_p"]),
        pytest.param("engine:\n  max_num_seqs: 0\n", ["max_num_seqs"], marks=pytest.mark.ungraded),
        pytest.param("engine:\n  policy: random\n", ["policy"], marks=pytest.mark.ungraded),
        pytest.param("resource:\n  dtype: int8\n", ["dtype"], marks=pytest.mark.ungraded),
        pytest.param("engine: [1, 2\n", ["not valid YAML"], marks=pytest.mark.ungraded),
    ],
)
def test_bad_config_files_name_the_problem(tmp_path, text, words):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(InvalidRequestError) as info:
        load_settings(path)
    for word in words:
        assert word in str(info.value)


def test_engine_from_a_config_file_uses_its_sampling_defaults(tmp_path, tiny_dir):
    path = tmp_path / "engine.yaml"
    path.write_text(YAML.format(model=tiny_dir[0]))
    with InferenceEngine.from_config_file(path) as engine:
        assert engine.sampling_defaults.max_tokens == 5 and engine.llm.memory.num_blocks == 40
        result = engine.generate("hello", ignore_eos=True)
        assert result.completion_tokens == 5


@pytest.mark.ungraded
def test_cli_generate_batches_prompts_with_a_config_file(tmp_path, tiny_dir):
    path = tmp_path / "engine.toml"
    path.write_text(TOML.format(model=tiny_dir[0]))
    result = miniyaie(
        "generate", "hello", "Once upon", "--config", str(path), "--temperature", "0", "--max-tokens", "3", "--impl", "engine=solutions"
    )
    assert result.returncode == 0, result.stderr
    assert "--- [0] (3 tokens, length)" in result.stdout and "--- [1] (3 tokens, length)" in result.stdout
    assert "Once upon" in result.stdout


@pytest.mark.ungraded
def test_cli_reports_config_and_impl_errors_clearly(tmp_path):
    assert_clear_error(miniyaie("generate", "hi", "--config", str(tmp_path / "missing.yaml")), "does not exist")
    (tmp_path / "bad.toml").write_text("[engine]\nspeed = 3\n")
    assert_clear_error(miniyaie("generate", "hi", "--config", str(tmp_path / "bad.toml")), "speed")
    assert_clear_error(miniyaie("chat", "--message", "hi", "--impl", "nonsense=chapters"), "nonsense")


@pytest.mark.ungraded
@pytest.mark.parametrize("bad, message", [
    (dict(speculative="eagle"), "unknown speculative method"),
    (dict(speculative="ngram", num_speculative_tokens=0), "num_speculative_tokens"),
    (dict(speculative="ngram", prompt_lookup_min=3, prompt_lookup_max=2), "prompt_lookup_min"),
    (dict(speculative="ngram", tensor_parallel_size=2), "tensor parallelism"),
    (dict(speculative="ngram", draft_model="small"), "draft_model is used only"),
    (dict(num_speculative_tokens=8), "num_speculative_tokens is used only with speculative"),  # it would do nothing
    (dict(max_speculative_step_tokens=32), "max_speculative_step_tokens is used only"),
    (dict(speculative="draft", draft_model="small", prompt_lookup_max=5), "prompt_lookup_max is used only with speculative='ngram'"),
    (dict(speculative=""), "unknown speculative method"),
])
def test_bad_speculative_settings_are_refused_with_one_clear_line(bad, message):
    with pytest.raises(ValueError, match=message):
        EngineConfig(**bad)


def test_speculative_settings_come_from_the_config_file_and_the_engine_keywords(tmp_path):
    path = tmp_path / "engine.yaml"
    path.write_text("engine:\n  speculative: ngram\n  num_speculative_tokens: 3\n  max_speculative_step_tokens: 24\n")
    engine = load_settings(path).engine
    assert (engine.speculative, engine.num_speculative_tokens, engine.max_speculative_step_tokens) == ("ngram", 3, 24)
    path.write_text("engine:\n  speculative: eagle\n")
    with pytest.raises(InvalidRequestError, match="speculative"):
        load_settings(path)


def test_cli_generate_speculates_when_asked_and_refuses_a_bad_k(tmp_path, tiny_dir):
    path = tmp_path / "engine.toml"
    path.write_text(TOML.format(model=tiny_dir[0]))
    args = ("generate", "hello hello hello", "--config", str(path), "--temperature", "0", "--max-tokens", "5")
    plain, spec = miniyaie(*args), miniyaie(*args, "--speculative", "ngram", "--num-speculative-tokens", "3")
    assert plain.returncode == 0 and spec.returncode == 0, spec.stderr
    assert spec.stdout == plain.stdout, "greedy output is the same with drafts"
    assert_clear_error(miniyaie(*args, "--speculative", "ngram", "--num-speculative-tokens", "0"), "num-speculative-tokens")
    assert_clear_error(miniyaie(*args, "--num-speculative-tokens", "3"), "--num-speculative-tokens is used only with --speculative")


@pytest.mark.ungraded
def test_the_engine_keywords_refuse_speculative_settings_that_would_do_nothing(tiny_dir):
    # refused before the model loads: nothing is started
    with pytest.raises(ValueError, match="unknown speculative method"):
        InferenceEngine(str(tiny_dir[0]), speculative="")
    with pytest.raises(ValueError, match="num_speculative_tokens is used only with speculative"):
        InferenceEngine(str(tiny_dir[0]), num_speculative_tokens=4)

def test_cli_generate_drafts_with_a_draft_model_and_refuses_none(tmp_path, tiny_dir):
    path = tmp_path / "engine.toml"
    path.write_text(TOML.format(model=tiny_dir[0]))
    args = ("generate", "hello hello hello", "--config", str(path), "--temperature", "0", "--max-tokens", "5",
            "--speculative", "draft", "--num-speculative-tokens", "3")
    assert_clear_error(miniyaie(*args), "--draft-model")
    drafted = miniyaie(*args, "--draft-model", str(tiny_dir[0]))  # the model drafting for itself
    assert drafted.returncode == 0 and drafted.stdout.startswith("hello hello hello"), drafted.stderr
