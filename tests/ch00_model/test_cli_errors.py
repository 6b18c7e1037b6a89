"""Bad input to `miniyaie`: one clear line on stderr, exit status 2, no traceback."""

import json

import pytest
from cli_helpers import assert_clear_error, miniyaie


@pytest.mark.ungraded
def test_missing_model_path_is_a_clear_error(tmp_path):
    assert_clear_error(miniyaie("generate", "hi", "--model", str(tmp_path / "nowhere")), "does not exist")


@pytest.mark.ungraded
def test_corrupt_config_is_a_clear_error(tmp_path):
    (tmp_path / "config.json").write_text("{ this is not json")
    assert_clear_error(miniyaie("generate", "hi", "--model", str(tmp_path)), "config.json")


@pytest.mark.ungraded
def test_unsupported_model_family_is_a_clear_error(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    assert_clear_error(miniyaie("generate", "hi", "--model", str(tmp_path)), "not supported")


@pytest.mark.ungraded
@pytest.mark.parametrize("flag,value", [("--max-tokens", "-3"), ("--max-tokens", "0"), ("--temperature", "-1"), ("--top-p", "1.5")])
def test_bad_sampling_options_are_clear_errors(flag, value):
    assert_clear_error(miniyaie("generate", "hi", flag, value), flag)


@pytest.mark.task("0.3")
def test_prompt_longer_than_context_is_a_clear_error(smollm2_dir):
    result = miniyaie("generate", "word " * 9000, "--max-tokens", "4")  # SmolLM2's context is 8192
    assert_clear_error(result, "context")
