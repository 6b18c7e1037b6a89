"""The opt-in "-a8" schemes: weight blocks multiplied by activations rounded to 8 bits (W4A8 / W8A8).

`gguf-a8` (and `int8-a8`, `int4-a8`, `int4-sym-a8`) load the weights as the scheme without the suffix does,
then every linear over blocks rounds its input to signed bytes per row and block of 32 (a step and the
block's sum, GGUF's Q8_1, as llama.cpp does) and multiplies bytes by codes with integer dot products
(backends/cpu/quant_a8.cpp: AVX512-VNNI, AVX-VNNI or AVX2). Where the CPU has AMX, steps of AMX_ROWS rows or
more go to its 8-bit tiles, and prefill chunks of BF16_ROWS or more to its bfloat16 tiles instead, the weights
dequantized per call and x rounded to bfloat16 rather than to bytes (quant_bf16_amx.cpp says why). Without AMX,
every step goes to the same byte products across the tiles' 16 columns on AVX512-VNNI where the CPU has it
(quant_a8_panels.cpp; with AMX, the one-row steps the tile unit does not take). It is faster
and it is not the float32 model any more: the default schemes stay exact and this one is chosen by name;
`miniyaie bench quality` prices it.
"""

from __future__ import annotations

import torch
from torch import nn

from miniyaie.quant.linear import QuantizedLinear

SUFFIX = "-a8"
BLOCK = 32  # activations per block
AMX_ROWS = 2  # quant_a8.cpp sends steps with this many rows or more to the AMX tiles where the layer has them
BF16_ROWS = 64  # and with this many (prefill chunks) to the tiles' bfloat16 multiplies (quant_bf16_amx.cpp)
PANEL_ROWS = 1  # steps AMX does not take, from this many rows, to the VNNI panels (quant_a8_panels.cpp: bench_a8_panels)
ISAS = {3: "AVX512-VNNI", 2: "AVX-VNNI", 1: "AVX2"}
calls = {"linear": 0, "rows": 0}  # kernel calls and rows they multiplied, since the process started


def split_scheme(name: str) -> tuple[str, bool]:
    """'gguf-a8' -> ('gguf', True); any other name -> (name, False)."""
    name = str(name).strip()
    return (name[: -len(SUFFIX)], True) if name.endswith(SUFFIX) else (name, False)


def kernel_isa() -> str | None:
    """The instruction set quant_a8.cpp was built for on this CPU; None where it has no kernel here."""
    from miniyaie.backends.cpu.kernels import load

    library = load()
    return None if library is None else ISAS.get(library.quant_a8_isa())


class Int8ActivationLinear(QuantizedLinear):
    """A QuantizedLinear whose input is rounded to 8 bits per row and block of 32 before the product.

    Where the CPU has AMX or AVX512-VNNI it also keeps its weights laid out in tiles of 16 columns (buffers
    tile_codes, tile_scales, tile_mins; quant_a8_amx.cpp and quant_a8_panels.cpp say why), made once (by
    use_int8_activations for the layers that run, on first use for a merge's members): a second copy as large
    as the codes, which the tiles' kernels read instead of the codes (every step without AMX; with AMX, the
    tile unit's steps and the one-row steps on AVX512-VNNI)."""

    def kernel_fields(self) -> list[int] | None:
        if type(self).forward is not Int8ActivationLinear.forward:
            return None
        tiles = self.tiles()
        return self._fields(rounds_activations=1, tiles=[0, 0, 0] if tiles is None else [t.data_ptr() for t in tiles])

    def tiles(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """(codes, scales, minimums) laid out in tiles, or None where the CPU has neither AMX nor AVX512-VNNI."""
        from miniyaie.backends.cpu.kernels import load

        made_from = self.__dict__.get("_tiles_made_from")
        if made_from is not None and made_from[0] is self.qweight:
            return made_from[1]
        library, w = load(), self.qweight
        tiles = None
        if library is not None and (library.quant_a8_amx_ready() or library.quant_a8_panels_ready()):
            n, k = self.out_features, self.in_features
            tiles = (torch.empty(library.quant_a8_tile_bytes(n, k, w.bits), dtype=torch.uint8),
                     torch.empty(library.quant_a8_tile_halves(n, k), dtype=torch.float16),
                     torch.empty(library.quant_a8_tile_halves(n, k) if w.bits == 4 else 0, dtype=torch.float16))
            library.quant_a8_lay_out_tiles(w.codes.data_ptr(), w.bits, w.scales.data_ptr(),
                                           None if w.mins is None else w.mins.data_ptr(), n, k, w.group,
                                           *(t.data_ptr() for t in tiles))
            for name, tensor in zip(("tile_codes", "tile_scales", "tile_mins"), tiles):
                self.register_buffer(name, tensor, persistent=False)  # counted by weight_bytes
        self.__dict__["_tiles_made_from"] = (self.qweight, tiles)
        return tiles

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from miniyaie.backends.cpu.kernels import load

        library, w, tiles = load(), self.qweight, self.tiles()
        tile_pointers = [None] * 3 if tiles is None else [t.data_ptr() for t in tiles]
        rows = x.reshape(-1, self.in_features).to(torch.float32).contiguous()
        out = torch.empty(rows.shape[0], self.out_features)
        library.quant_matmul_a8_layer(rows.data_ptr(), rows.shape[0], self.in_features, w.codes.data_ptr(), w.bits,
                                      w.scales.data_ptr(), None if w.mins is None else w.mins.data_ptr(),
                                      self.out_features, w.group, *tile_pointers, out.data_ptr(), torch.get_num_threads())
        calls["linear"] += 1
        calls["rows"] += rows.shape[0]
        if self.bias is not None:
            out += self.bias
        return out.view(*x.shape[:-1], self.out_features).to(x.dtype)


def _fits(layer: QuantizedLinear) -> str | None:
    """Why the kernel cannot take this layer's blocks, or None."""
    w = layer.qweight
    if layer.in_features % BLOCK:
        return f"its width {layer.in_features} is not a multiple of {BLOCK}"
    if w.bits == 4 and w.group != BLOCK:
        return f"its 4-bit groups are {w.group} weights, the kernel takes groups of {BLOCK}"
    if w.bits == 8 and w.group % BLOCK:
        return f"its 8-bit groups are {w.group} weights, not a multiple of {BLOCK}"
    if not w.codes.is_contiguous() or w.codes.device.type != "cpu":
        return "its blocks are not contiguous CPU tensors"
    return None


def check_int8_activations(device: str | torch.device, dtype: torch.dtype) -> None:
    """ValueError (one line) where 8-bit activations cannot run: not the CPU in float32, no kernel for this CPU."""
    if torch.device(device).type != "cpu" or dtype != torch.float32:
        raise ValueError(f"8-bit activations run on the CPU in float32 only, not {torch.device(device).type} in {dtype}")
    if kernel_isa() is None:
        raise ValueError("8-bit activations need the CPU kernels built with AVX2 at least; this CPU or compiler has none")


def use_int8_activations(model: nn.Module, device: str | torch.device = "cpu",
                         dtype: torch.dtype = torch.float32) -> int:
    """Turn every linear over blocks of `model` (merged q/k/v and gate/up included) into an Int8ActivationLinear;
    returns how many. ValueError (one line) where it cannot run: not the CPU in float32, no kernel for this
    CPU, a layer whose blocks the kernel does not take (nothing is changed then)."""
    check_int8_activations(device, dtype)
    layers = [m for m in model.modules() if type(m) is QuantizedLinear]
    layers += [m.merged.linear for m in layers if getattr(m, "merged", None) is not None]
    layers = list({id(m): m for m in layers}.values())
    if not layers:
        raise ValueError("8-bit activations need weights in blocks, and this model has none")
    for layer in layers:
        reason = _fits(layer)
        if reason:
            raise ValueError(f"8-bit activations: a {layer.out_features}x{layer.in_features} layer cannot: {reason}")
    for layer in layers:
        layer.__class__ = Int8ActivationLinear
        if getattr(layer, "merged", None) is None:  # a merge's members run only where it cannot: tiles when they do
            layer.tiles()
    return len(layers)
