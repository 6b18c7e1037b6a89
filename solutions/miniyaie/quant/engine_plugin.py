"""What chapter 10 plugs into the engine (entry point `quantization` of `miniyaie.engine_plugins`).

The engine asks for it only when EngineConfig.quantization is not "none", after loading the model and
before a backend packs its float weights.
"""

from __future__ import annotations

from pathlib import Path

from miniyaie.quant.schemes import parse_scheme, quantize_model


def gguf_source(model) -> Path | None:
    """The GGUF file a model name is loaded from: the bundled SmolLM2's; None for any other."""
    if model in (None, "smollm2"):
        from miniyaie.model.loader import bundled_gguf

        return bundled_gguf()
    return None


def check_scheme(scheme: str) -> str:
    """The scheme's name if it is one (EngineConfig checks it when made); ValueError (one line) otherwise."""
    return parse_scheme(scheme).name


def quantize_loaded(loaded, source, scheme: str) -> None:
    """`loaded.model` (from `source`, a name or a path) in blocks; ModelLoadError (one line) where the scheme
    cannot apply."""
    from miniyaie.engine.errors import ModelLoadError

    try:
        quantize_model(loaded.model, scheme, gguf_path=gguf_source(source))
    except ValueError as exc:
        raise ModelLoadError(f"quantization {scheme!r}: {exc}") from None
