"""Making it fast: the roofline of a decode step, from Task 5.16's step_cost and roofline.

The model is the bundled SmolLM2-135M-Instruct (its config.json: 30 layers,
hidden 576, 9 query and 3 KV heads of 64, MLP 1,536, vocabulary 49,152, tied
embeddings) in float32, weights and KV cache; the machine is the page's two
Zen 3 cores (25 GB/s, 192 GFLOP/s). Each point is a decode step of `batch`
rows, every row at the same context.
"""

from __future__ import annotations

NAME = "ch05_step_roofline"
PAGE = "ch05_performance.md"
BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256]
CONTEXTS = [128, 512, 2048]  # tokens already cached for every row
BYTES_PER_S, FLOPS_PER_S = 25e9, 192e9
DTYPE_BYTES = 4  # float32 weights and K/V


def smollm2_config():
    from miniyaie.model import ModelConfig

    return ModelConfig("llama", vocab_size=49152, hidden_size=576, intermediate_size=1536, num_layers=30,
                       num_heads=9, num_kv_heads=3, head_dim=64, rms_norm_eps=1e-5, max_position_embeddings=8192,
                       rope_theta=100000.0, tie_word_embeddings=True)


def data() -> dict:
    from miniyaie.engine.step_cost import Machine, SeqStep, roofline, step_cost

    config, machine = smollm2_config(), Machine(BYTES_PER_S, FLOPS_PER_S, "2 Zen 3 cores")
    curves = []
    for context in CONTEXTS:
        points = []  # (batch, FLOPs per byte, attainable GFLOP/s, ms per output token, bound)
        for batch in BATCHES:
            cost = step_cost(config, [SeqStep(1, context)] * batch, DTYPE_BYTES, DTYPE_BYTES)
            roof = roofline(cost, machine)
            points.append([batch, round(cost.intensity, 4), round(cost.flops / roof.seconds / 1e9, 3),
                           round(roof.seconds / batch * 1e3, 4), roof.bound])
        curves.append({"context": context, "points": points})
    return {"bytes_per_s": BYTES_PER_S, "flops_per_s": FLOPS_PER_S, "curves": curves}


def draw(data: dict):
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FixedLocator, FormatStrFormatter, NullLocator

    from miniyaie.course.figures import style

    bw, peak = data["bytes_per_s"] / 1e9, data["flops_per_s"] / 1e9
    ridge = peak / bw
    colours = [style.BLUE, style.ORANGE, style.VERMILION]
    fig, (left, right) = style.figure(4.8, ncols=2)

    def plot(ax, curve, colour, x, y):
        points = curve["points"]
        ax.plot([p[x] for p in points], [p[y] for p in points], "-", color=colour, linewidth=1.2)
        for bound, marker in (("memory", "o"), ("compute", "s")):
            chosen = [p for p in points if p[4] == bound]
            ax.plot([p[x] for p in chosen], [p[y] for p in chosen], marker, color=colour, markersize=5)

    xs = [0.3, ridge, 60]
    left.plot(xs, [min(peak, x * bw) for x in xs], color="#333333", linewidth=2)
    left.axvline(ridge, color=style.GREY, linestyle=":", linewidth=1)
    left.text(ridge * 1.08, 3.6, f"ridge: {ridge:.1f} FLOPs/byte", fontsize=9, color="#555555")
    left.text(2.2, 22, f"memory roof\n{bw:.0f} GB/s", fontsize=9, color="#333333")
    left.text(0.35, peak * 1.12, f"compute roof: {peak:.0f} GFLOP/s", fontsize=9, color="#333333")
    for curve, colour in zip(data["curves"], colours):
        plot(left, curve, colour, 1, 2)
        for batch, x, y, _, _ in curve["points"]:
            if batch == 256 or (batch in (1, 16) and curve["context"] == 512):
                left.annotate(f"{batch}", (x, y), textcoords="offset points", xytext=(-3, 7) if batch == 256 else (5, -12),
                              fontsize=8.5, color=colour, ha="center" if batch == 256 else "left")
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlim(0.3, 60)
    left.set_ylim(3, 400)
    left.set_xlabel("arithmetic intensity (FLOPs per byte moved)")
    left.set_ylabel("attainable GFLOP/s")
    left.set_title("Decode steps on the roofline (numbers: rows)")

    for curve, colour in zip(data["curves"], colours):
        plot(right, curve, colour, 0, 3)
    right.set_xscale("log", base=2)
    right.set_yscale("log")
    right.xaxis.set_major_locator(FixedLocator(BATCHES))
    right.xaxis.set_minor_locator(NullLocator())
    right.xaxis.set_major_formatter(FormatStrFormatter("%g"))
    right.yaxis.set_major_locator(FixedLocator([1, 1.5, 2, 3, 5, 10, 20, 30]))
    right.yaxis.set_minor_locator(NullLocator())
    right.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    right.set_ylim(1.2, 32)
    right.set_xlabel("decode rows in the step (batch size)")
    right.set_ylabel("predicted ms per output token")
    right.set_title("Time per token: batching pays up to a roof")

    handles = [Line2D([], [], color=c, linewidth=1.2, label=f"every row at context {curve['context']}")
               for curve, c in zip(data["curves"], colours)]
    handles += [Line2D([], [], color="#555555", marker="o", linestyle="", label="memory-bound"),
                Line2D([], [], color="#555555", marker="s", linestyle="", label="compute-bound")]
    right.legend(handles=handles, loc="upper right", frameon=False, fontsize=9)
    fig.suptitle(f"SmolLM2-135M decode steps in float32 on a roofline of {bw:.0f} GB/s and {peak:.0f} GFLOP/s (2 Zen 3 cores)")
    fig.tight_layout()
    return fig
