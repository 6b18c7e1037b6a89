"""Engine settings from a YAML or TOML file (sections engine, sampling, resource).

    engine:                      # how the engine runs (EngineConfig fields, plus the model)
      model: smollm2
      max_num_batched_tokens: 512
      max_num_seqs: 64
      enable_prefix_caching: true
      enforce_eager: false       # true: no CUDA graphs for decode steps
      overlap_schedule: false    # true: the host records a step while the model runs the next
      speculative: ngram         # speculative decoding (chapter 9): ngram or draft (with draft_model: PATH); leave out for none
      num_speculative_tokens: 4
      lora_adapters:             # LoRA adapters served beside the base model (chapter 11): name -> PEFT directory
        support: /models/support-lora
      max_loras: 4               # adapters resident at once (others are loaded when a request needs them)
      max_lora_rank: 16
    sampling:                    # default SamplingParams of every request
      temperature: 0.7
      top_p: 0.95
      max_tokens: 256
    resource:                    # where and how much
      device: cpu
      dtype: float32
      kv_cache_bytes: 1073741824  # 1 GiB (the default), or num_blocks
      block_size: 16

TOML is the same with [engine], [sampling] and [resource] tables. Every
key is checked: an unknown one is an error that names it (and its section),
and values are validated by EngineConfig / SamplingParams themselves.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, fields
from pathlib import Path

from miniyaie.engine.config import EngineConfig
from miniyaie.engine.errors import InvalidRequestError
from miniyaie.engine.sampling_params import SamplingParams

ENGINE_KEYS = {"model", "max_num_batched_tokens", "max_num_seqs", "policy", "enable_prefix_caching", "attention_backend",
               "enforce_eager", "overlap_schedule", "speculative", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max",
               "max_speculative_step_tokens", "draft_model", "quantization", "kv_cache_dtype", "lora_adapters", "max_loras",
               "max_lora_rank"}
RESOURCE_KEYS = {"device", "dtype", "kv_cache_bytes", "num_blocks", "block_size"}
DTYPES = ("float32", "bfloat16", "float16")


class ConfigError(InvalidRequestError):
    """A config file that cannot be used; the message names the file, section and key."""


@dataclass(frozen=True)
class EngineSettings:
    """Everything a config file can say: the model, where it runs, the engine, the default sampling."""

    model: str | None = None
    device: str | None = None
    dtype: str | None = None
    engine: EngineConfig = field(default_factory=EngineConfig)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    sampling_keys: frozenset[str] = frozenset()  # the sampling fields the file sets (a server lets them win over the model's)


def _read(path: Path) -> dict:
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    text = path.read_text()
    try:
        if path.suffix.lower() in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        elif path.suffix.lower() == ".toml":
            if sys.version_info >= (3, 11):
                import tomllib
            else:  # pragma: no cover - Python 3.10
                import tomli as tomllib
            data = tomllib.loads(text)
        else:
            raise ConfigError(f"config file {path}: use a .yaml, .yml or .toml file")
    except ConfigError:
        raise
    except Exception as exc:  # a syntax error: say where
        raise ConfigError(f"config file {path} is not valid {path.suffix[1:].upper()}: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected sections engine:, sampling:, resource:")
    return data


def load_settings(path: str | Path) -> EngineSettings:
    """Read and validate a config file."""
    path = Path(path)
    data = _read(path)
    unknown = sorted(set(data) - {"engine", "sampling", "resource"})
    if unknown:
        raise ConfigError(f"config file {path}: unknown section {unknown[0]!r} (sections: engine, sampling, resource)")
    sections = {}
    for name in ("engine", "sampling", "resource"):
        section = data.get(name) or {}
        if not isinstance(section, dict):
            raise ConfigError(f"config file {path}: section {name!r} must be a mapping of keys to values")
        sections[name] = section
    allowed = {"engine": ENGINE_KEYS, "resource": RESOURCE_KEYS, "sampling": {f.name for f in fields(SamplingParams)}}
    for name, section in sections.items():
        for key in section:
            if key not in allowed[name]:
                raise ConfigError(f"config file {path}: unknown key {key!r} in section {name!r} (known: {', '.join(sorted(allowed[name]))})")
    engine, resource = dict(sections["engine"]), dict(sections["resource"])
    model = engine.pop("model", None)
    device, dtype = resource.pop("device", None), resource.pop("dtype", None)
    if dtype is not None and dtype not in DTYPES:
        raise ConfigError(f"config file {path}: resource.dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    try:
        engine_config = EngineConfig(**engine, **resource)
        sampling = SamplingParams(**sections["sampling"])
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"config file {path}: {exc}") from None
    return EngineSettings(model, device, dtype, engine_config, sampling, frozenset(sections["sampling"]))
