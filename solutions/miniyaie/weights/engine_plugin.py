"""What chapter 10 plugs into the engine (entry point `quantization` of `miniyaie.engine_plugins`).

The engine asks for it to load the model whenever EngineConfig.quantization is not "none". The default,
"auto", runs the bundled SmolLM2 on the CPU as its file holds it (gguf: 97 MB of blocks, about twice the
float32 rate of one request) and any other model, or any other device, in float weights. A scheme's name
with "-a8" (gguf-a8, int4-a8, ...) also rounds the activations to 8 bits (int8_activations.py): opt-in.
"""

from __future__ import annotations

from pathlib import Path

import torch

from miniyaie.quant.schemes import parse_scheme, quantize_model
from miniyaie.weights.int8_activations import check_int8_activations, split_scheme, use_int8_activations


def gguf_source(model) -> Path | None:
    """The GGUF file a model is loaded from: the bundled SmolLM2's, or a path to a .gguf file; None otherwise."""
    if model in (None, "smollm2"):
        from miniyaie.model.loader import bundled_gguf

        return bundled_gguf()
    path = Path(str(model)).expanduser()
    try:
        return path if path.suffix == ".gguf" and path.is_file() else None
    except OSError:  # not a path at all (too long, ...): the model loader says what is wrong with it
        return None


def check_scheme(scheme: str) -> str:
    """The scheme's name if it is one ("auto" included); ValueError (one line) otherwise."""
    if str(scheme).strip() == "auto":
        return "auto"
    base, a8 = split_scheme(scheme)
    if a8 and parse_scheme(base).kind == "none":
        raise ValueError(f"quantization {scheme!r}: 8-bit activations multiply weights in blocks; none has none")
    return parse_scheme(base).name + ("-a8" if a8 else "")


def resolve_scheme(scheme: str, source, device: str | torch.device, dtype: torch.dtype) -> str:
    """What "auto" means for this model: gguf for a GGUF file run on the CPU in float32, none otherwise."""
    if scheme != "auto":
        return scheme
    on_cpu = torch.device(device).type == "cpu" and dtype == torch.float32
    return "gguf" if on_cpu and gguf_source(source) is not None else "none"


def load_quantized(source, scheme: str, dtype: torch.dtype, device: str | torch.device):
    """The LoadedModel of `source` (a name or a path) with its weights in `scheme`'s blocks; ModelLoadError
    (one line) where the scheme cannot apply. "auto" falls back to float weights, saying so, while chapter
    10's tasks are stubs."""
    from miniyaie.engine.errors import ModelLoadError
    from miniyaie.model import ModelLoadError as ChapterZeroModelLoadError
    from miniyaie.model import load

    (chosen, a8), gguf = split_scheme(resolve_scheme(scheme, source, device, dtype)), gguf_source(source)
    try:
        if a8:  # refused before anything is loaded where the CPU has no kernel
            check_int8_activations(device, dtype)
        if chosen == "gguf" and gguf is not None and torch.device(device).type == "cpu":  # no float32 copy made
            from miniyaie.weights.gguf_model import load_gguf_model

            loaded = load_gguf_model(gguf, dtype)
        else:
            loaded = load(source, dtype=dtype, device=device)
            quantize_model(loaded.model, chosen, gguf_path=gguf)
        if a8:
            use_int8_activations(loaded.model, device, dtype)
        return loaded
    except NotImplementedError as exc:
        if scheme != "auto":
            raise
        print(f"Chapter 10 is not done yet ({exc}): running the model in float weights", flush=True)
        return load(source, dtype=dtype, device=device)
    except ChapterZeroModelLoadError:
        raise  # the engine's loader words it
    except ValueError as exc:
        raise ModelLoadError(f"quantization {scheme!r}: {exc}") from None
