"""Where the chapters built on the engine plug into it: an entry-point group, looked up by name.

The engine (chapter 5) imports nothing above it. Tensor parallelism (chapter 7), structured output (chapter
8), speculative decoding (chapter 9), quantization (chapter 10), LoRA adapters (chapter 11) and the settings file (provided, serving/)
declare what they provide in pyproject.toml (`tensor_parallel = "miniyaie.distributed.engine_plugin:start_tensor_parallel"`
in `[project.entry-points."miniyaie.engine_plugins"]`, and so on), and `pip install -e .` registers it.

The engine asks for one by name only when a setting or a request needs it (tensor_parallel_size > 1, a
constrained request, structured_limits, a speculative setting, a config file, quantization, LoRA adapters), and says
which plugin is missing when none is installed. vLLM loads its plugins the same way (`vllm.general_plugins`).
"""

from __future__ import annotations

from functools import lru_cache
from importlib.metadata import entry_points

from miniyaie.engine.errors import InvalidRequestError

GROUP = "miniyaie.engine_plugins"
TENSOR_PARALLEL = "tensor_parallel"  # start_tensor_parallel(model, config, device, dtype) -> (LoadedModel, runtime)
STRUCTURED_OUTPUT = "structured_output"  # a module: check_limits, vocabulary, constraints
SPECULATIVE = "speculative"  # a module: check_settings, with_speculation, load_draft_model, speculative_runner, speculative_stats
SETTINGS_FILE = "settings_file"  # load_settings(path) -> settings with .engine, .sampling, .model, .device, .dtype
QUANTIZATION = "quantization"  # load_quantized(source, scheme, dtype, device): a LoadedModel with weights in blocks
LORA = "lora"  # a module: check_settings, attach (the engine's adapters: slots, loads, the step's rows)

WHAT = {
    TENSOR_PARALLEL: "tensor_parallel_size > 1 (chapter 7, miniyaie.distributed)",
    STRUCTURED_OUTPUT: "structured output: response_format, a regex or JSON schema, structured_limits (chapter 8, miniyaie.structured)",
    SPECULATIVE: "speculative decoding (speculative, num_speculative_tokens and chapter 9's other settings, miniyaie.speculative)",
    SETTINGS_FILE: "reading a YAML/TOML settings file (miniyaie.serving)",
    QUANTIZATION: "quantization: weights in 4- or 8-bit blocks (chapter 10, miniyaie.quant)",
    LORA: "LoRA adapters (lora_adapters, a request's adapter: chapter 11, miniyaie.lora)",
}


class PluginMissingError(InvalidRequestError):
    """A setting or request needs a plugin that no installed package provides."""


@lru_cache(maxsize=None)
def _registered() -> dict[str, object]:
    return {ep.name: ep for ep in entry_points(group=GROUP)}


def available(name: str) -> bool:
    """Whether an installed package provides the plugin `name`."""
    return name in _registered()


def plugin(name: str):
    """The object registered as `name` in the group (imported on first use); PluginMissingError if none is."""
    entry = _registered().get(name)
    if entry is None:
        raise PluginMissingError(
            f"{WHAT.get(name, name)} needs the engine plugin {name!r}, and no installed package provides it "
            f"(entry-point group {GROUP!r}; `pip install -e .` registers the ones in pyproject.toml)"
        )
    return _load(entry)


@lru_cache(maxsize=None)
def _load(entry):
    return entry.load()
