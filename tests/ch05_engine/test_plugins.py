"""The engine reaches chapters 7 and 8 and the settings file only through its plugin group (engine/plugins.py)."""

import ast

import pytest

from miniyaie._switch import SOLUTIONS_ROOT
from miniyaie.engine import EngineConfig, InferenceEngine, InvalidRequestError
from miniyaie.engine import plugins

pytestmark = pytest.mark.ungraded

ABOVE_THE_ENGINE = ("api", "bench", "cli", "course", "distributed", "serving", "structured")


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


def test_every_plugin_the_engine_names_is_installed_and_loads():
    """pyproject.toml declares them; `pip install -e .` registers them."""
    for name in (plugins.TENSOR_PARALLEL, plugins.STRUCTURED_OUTPUT, plugins.SETTINGS_FILE):
        assert plugins.available(name), name
        assert plugins.plugin(name) is not None
    assert callable(plugins.plugin(plugins.TENSOR_PARALLEL))
    assert callable(plugins.plugin(plugins.STRUCTURED_OUTPUT).constraints)


@pytest.fixture
def no_plugins(monkeypatch):
    monkeypatch.setattr(plugins, "_registered", lambda: {})


def test_without_plugins_what_needs_one_is_refused_naming_it(no_plugins, tiny_dir, tiny_loaded):
    with pytest.raises(InvalidRequestError, match="'structured_output'.*entry-point group 'miniyaie.engine_plugins'"):
        EngineConfig(structured_limits={"max_items": 3})
    with pytest.raises(plugins.PluginMissingError, match="tensor_parallel_size > 1 .*'tensor_parallel'"):
        InferenceEngine(str(tiny_dir[0]), EngineConfig(tensor_parallel_size=2, num_blocks=32, block_size=4))
    with pytest.raises(plugins.PluginMissingError, match="'settings_file'"):
        InferenceEngine.from_config_file("engine.yaml")
    with InferenceEngine(tiny_loaded, EngineConfig(num_blocks=64, block_size=4)) as engine:
        with pytest.raises(plugins.PluginMissingError, match="structured output.*'structured_output'"):
            engine.generate("Hi", max_tokens=3, regex="[ab]+")
        assert len(engine.generate("Hi", max_tokens=3, ignore_eos=True).token_ids) == 3  # a plain request needs no plugin
        assert engine.get_stats()["structured_output"] == {}
