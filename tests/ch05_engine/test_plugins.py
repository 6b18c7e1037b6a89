"""The engine reaches chapters 7 to 10 and the settings file only through its plugin group (engine/plugins.py)."""

import ast

import pytest

from miniyaie._switch import SOLUTIONS_ROOT
from miniyaie.engine import EngineConfig, InferenceEngine, InvalidRequestError
from miniyaie.engine import plugins

pytestmark = [pytest.mark.task(f"5.{n}") for n in range(1, 18)]  # end to end, but for own marks

ABOVE_THE_ENGINE = ("api", "bench", "cli", "course", "distributed", "lora", "lora_serving", "quant", "serving",
                    "speculative", "structured", "weights")


@pytest.mark.ungraded
def test_the_engine_package_imports_nothing_above_it():
    found = []
    for path in sorted((SOLUTIONS_ROOT / "miniyaie" / "engine").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            found += [f"{path.name}: {name}" for name in names
                      if name.startswith("miniyaie.") and name.split(".")[1] in ABOVE_THE_ENGINE]
    assert not found, f"the engine imports packages built on it: {found}"


@pytest.mark.ungraded
def test_every_plugin_the_engine_names_is_installed_and_loads():
    """pyproject.toml declares them; `pip install -e .` registers them."""
    for name in (plugins.TENSOR_PARALLEL, plugins.STRUCTURED_OUTPUT, plugins.SPECULATIVE, plugins.SETTINGS_FILE,
                 plugins.QUANTIZATION, plugins.LORA):
        assert plugins.available(name), name
        assert plugins.plugin(name) is not None
    assert callable(plugins.plugin(plugins.TENSOR_PARALLEL))
    assert callable(plugins.plugin(plugins.STRUCTURED_OUTPUT).constraints)
    speculative = plugins.plugin(plugins.SPECULATIVE)
    for name in ("check_settings", "with_speculation", "load_draft_model", "speculative_runner", "speculative_stats"):
        assert callable(getattr(speculative, name)), name


@pytest.fixture
def no_plugins(monkeypatch):
    monkeypatch.setattr(plugins, "_registered", lambda: {})


def test_without_plugins_what_needs_one_is_refused_naming_it(no_plugins, tiny_dir, tiny_loaded):
    with pytest.raises(InvalidRequestError, match="'structured_output'.*entry-point group 'miniyaie.engine_plugins'"):
        EngineConfig(structured_limits={"max_items": 3})
    with pytest.raises(plugins.PluginMissingError, match="tensor_parallel_size > 1 .*'tensor_parallel'"):
        InferenceEngine(str(tiny_dir[0]), EngineConfig(tensor_parallel_size=2, num_blocks=32, block_size=4))
    with pytest.raises(plugins.PluginMissingError, match="speculative decoding .*'speculative'.*'miniyaie.engine_plugins'"):
        EngineConfig(speculative="ngram")
    with pytest.raises(plugins.PluginMissingError, match="LoRA adapters .*'lora'"):
        EngineConfig(lora_adapters={"a": "adapter-dir"})
    with pytest.raises(plugins.PluginMissingError, match="'speculative'"):
        InferenceEngine(tiny_loaded, EngineConfig(num_blocks=64, block_size=4), num_speculative_tokens=3)
    with pytest.raises(plugins.PluginMissingError, match="'settings_file'"):
        InferenceEngine.from_config_file("engine.yaml")
    with InferenceEngine(tiny_loaded, EngineConfig(num_blocks=64, block_size=4)) as engine:
        with pytest.raises(plugins.PluginMissingError, match="structured output.*'structured_output'"):
            engine.generate("Hi", max_tokens=3, regex="[ab]+")
        assert len(engine.generate("Hi", max_tokens=3, ignore_eos=True).token_ids) == 3  # a plain request needs no plugin
        stats = engine.get_stats()
        assert stats["structured_output"] == {} and stats["speculative"] == {}, stats
