"""Loading checkpoints of the three families (provided code, not graded)."""

import pytest
import torch
from tiny_models import save_tiny_model

from miniyaie.model import ModelLoadError, load_model
from miniyaie.model.loader import read_config


@pytest.mark.ungraded
@pytest.mark.parametrize(
    "kind,qkv_bias,qk_norm,tied,rope_type",
    [
        ("llama", False, False, False, "default"),
        ("llama-tied-mha", False, False, True, "default"),
        ("llama3-rope", False, False, False, "llama3"),
        ("llama-linear-rope", False, False, False, "linear"),
        ("qwen2", True, False, True, "default"),
        ("qwen3", False, True, False, "default"),
    ],
)
def test_config_features_are_read_from_the_checkpoint(tmp_path, kind, qkv_bias, qk_norm, tied, rope_type):
    save_tiny_model(kind, tmp_path)
    config = read_config(tmp_path)
    assert (config.qkv_bias, config.qk_norm, config.tie_word_embeddings) == (qkv_bias, qk_norm, tied)
    assert config.rope_scaling["rope_type"] == rope_type


@pytest.mark.task("0.3")
@pytest.mark.parametrize("kind", ["qwen2", "llama-tied-mha"])
def test_loaded_weights_equal_the_checkpoint(tmp_path, kind):
    hf_model = save_tiny_model(kind, tmp_path)
    ours = load_model(tmp_path).state_dict()
    for name, tensor in hf_model.state_dict().items():
        torch.testing.assert_close(ours[name], tensor, rtol=0, atol=0)
    if read_config(tmp_path).tie_word_embeddings:
        model = load_model(tmp_path)
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


@pytest.mark.task("0.3")
def test_directory_without_weights_is_a_clear_error(tmp_path):
    save_tiny_model("llama", tmp_path)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(ModelLoadError, match="model.safetensors"):
        load_model(tmp_path)
