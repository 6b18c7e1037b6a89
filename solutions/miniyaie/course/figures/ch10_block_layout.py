"""Chapter 10: one Q4_1 block of 32 weights, its 16 levels, and the 16 bytes that hold its codes.

Drawn from the real components: `quantize_int4` chooses the block's step and minimum, `pack_nibbles`
lays the codes out, `dequantize` gives the decoded weights.
"""

from __future__ import annotations

NAME = "ch10_block_layout"
PAGE = "ch10_quantization.md"
GROUP = 32


def data() -> dict:
    import torch

    from miniyaie.quant import quantize_int4, unpack_nibbles

    weights = torch.randn(1, GROUP, generator=torch.Generator().manual_seed(7)) * 0.05
    block = quantize_int4(weights, GROUP)
    return {"weights": weights[0].tolist(), "decoded": block.dequantize()[0].tolist(),
            "codes": unpack_nibbles(block.codes, GROUP)[0].tolist(), "bytes": block.codes[0].tolist(),
            "d": float(block.scales[0, 0]), "m": float(block.mins[0, 0])}


def draw(data: dict):
    from matplotlib.patches import Patch, Rectangle

    from miniyaie.course.figures import style

    fig, (top, bottom) = style.figure(6.2, nrows=2, gridspec_kw={"height_ratios": [2.2, 1]})
    d, m, codes = data["d"], data["m"], data["codes"]
    for q in range(16):
        top.axhline(m + d * q, color=style.GREY, linewidth=0.6, zorder=0)
    half = GROUP // 2
    colours = [style.BLUE if i < half else style.ORANGE for i in range(GROUP)]
    top.scatter(range(GROUP), data["weights"], c=colours, s=28, zorder=3, label="float32 weight")
    top.scatter(range(GROUP), data["decoded"], marker="_", s=140, color="black", zorder=4, label="decoded: d * q + m")
    for i, (w, v) in enumerate(zip(data["weights"], data["decoded"])):
        top.plot([i, i], [w, v], color="#555555", linewidth=0.8, zorder=2)
    top.set_title(f"One Q4_1 block: 32 weights on 16 levels, step d = {d:.4f}, minimum m = {m:.4f} (float16 each)")
    top.set_xlabel("weight index in the block")
    top.set_ylabel("weight value")
    top.legend(loc="upper right", fontsize=9)
    style.blank(bottom, (-0.5, half + 0.5), (-0.2, 1.6))
    bottom.set_title("The block's 16 bytes: byte j = code j (low nibble) | code j + 16 (high nibble) << 4")
    for j, byte in enumerate(data["bytes"]):
        bottom.add_patch(Rectangle((j, 0.75), 0.95, 0.6, facecolor=style.ORANGE, alpha=0.8, edgecolor="white"))
        bottom.add_patch(Rectangle((j, 0.15), 0.95, 0.6, facecolor=style.BLUE, alpha=0.8, edgecolor="white"))
        bottom.text(j + 0.47, 1.05, str(codes[j + half]), ha="center", va="center", fontsize=9, color="white")
        bottom.text(j + 0.47, 0.45, str(codes[j]), ha="center", va="center", fontsize=9, color="white")
        bottom.text(j + 0.47, -0.05, f"{byte:02x}", ha="center", va="center", fontsize=8, color="#333333")
    bottom.legend(handles=[Patch(color=style.BLUE, label="low nibble: code j (weights 0-15)"),
                           Patch(color=style.ORANGE, label="high nibble: code j + 16 (weights 16-31)")],
                  loc="lower center", ncol=2, bbox_to_anchor=(0.5, -0.45), frameon=False)
    fig.tight_layout()
    return fig
