"""Chapter 7: one decoder layer under tensor parallelism, with its two all-reduces.

The diagram is drawn by hand; the slices each rank owns come from the
chapter's own sharding functions (miniyaie.distributed.sharding) for
SmolLM2-135M's shapes on 3 ranks (its 9 query heads refuse 2).
"""

from __future__ import annotations

NAME = "ch07_tensor_parallel"
PAGE = "ch07_tensor_parallel.md"
MODEL = {"hidden": 576, "heads": 9, "kv_heads": 3, "head_dim": 64, "intermediate": 1536}
RANKS = 3


def data() -> dict:
    from miniyaie.distributed.sharding import kv_head_range, shard_range

    m = MODEL
    ranks = [{"heads": list(shard_range(m["heads"], r, RANKS)),
              "kv_heads": list(kv_head_range(m["heads"], m["kv_heads"], r, RANKS)),
              "features": list(shard_range(m["intermediate"], r, RANKS))} for r in range(RANKS)]
    return {"model": m, "ranks": ranks}


def draw(data: dict):
    from miniyaie.course.figures import style

    m, ranks = data["model"], data["ranks"]
    fig, axes = style.figure(7.4, nrows=2)
    lane = 1.0
    halves = [
        ("Attention half", [
            ("RMSNorm\n(whole)", style.LIGHT, lambda r: ""),
            ("q, k, v\ncolumn-parallel", style.SKY,
             lambda r: f"q heads {r['heads'][0]}-{r['heads'][1] - 1}\nKV head {_span(r['kv_heads'])}"),
            ("attention\nmy heads, my KV", style.SKY, lambda r: "RoPE, paged\nKV pool"),
            ("o_proj\nrow-parallel", style.ORANGE,
             lambda r: f"in: {(r['heads'][1] - r['heads'][0]) * m['head_dim']} cols\nout: partial [T, {m['hidden']}]"),
        ]),
        ("MLP half", [
            ("RMSNorm\n(whole)", style.LIGHT, lambda r: ""),
            ("gate, up\ncolumn-parallel", style.SKY,
             lambda r: f"features\n{r['features'][0]}-{r['features'][1] - 1}"),
            ("SiLU · mul", style.SKY, lambda r: f"[T, {r['features'][1] - r['features'][0]}]"),
            ("down_proj\nrow-parallel", style.ORANGE,
             lambda r: f"in: {r['features'][1] - r['features'][0]} cols\nout: partial [T, {m['hidden']}]"),
        ]),
    ]
    w, gap = 1.45, 0.38
    for ax, (title, stages) in zip(axes, halves):
        n = len(ranks)
        style.blank(ax, (-1.1, len(stages) * (w + gap) + 1.8), (-n * lane - 0.15, 0.35))
        ax.set_title(f"{title}: x [T, {m['hidden']}] whole on every rank", fontsize=11.5)
        for r, rank in enumerate(ranks):
            y = -(r + 1) * lane
            ax.text(-1.0, y + 0.4, f"rank {r}", fontsize=10.5, weight="bold", va="center")
            for i, (name, colour, detail) in enumerate(stages):
                x = i * (w + gap)
                style.box(ax, x, y + 0.16, w, 0.56, name, colour=colour, fontsize=9.5)
                text = detail(rank)
                if text:
                    ax.text(x + w / 2, y + 0.1, text, ha="center", va="top", fontsize=8.4, color="#333333")
                if i + 1 < len(stages):
                    style.arrow(ax, (x + w, y + 0.41), (x + w + gap, y + 0.41))
            end = len(stages) * (w + gap) - gap
            style.arrow(ax, (end, y + 0.41), (end + 0.45, y + 0.41))
        ar_x = len(stages) * (w + gap) + 0.07
        style.box(ax, ar_x, -n * lane + 0.1, 0.95, n * lane - 0.2,
                  "all-\nreduce\n(sum)", colour=style.VERMILION, fontsize=10)
        ax.texts[-1].set_color("white")
        ax.texts[-1].set_weight("bold")
        for r in range(n):
            y = -(r + 1) * lane
            style.arrow(ax, (ar_x + 0.95, y + 0.41), (ar_x + 1.35, y + 0.41))
            ax.text(ar_x + 1.4, y + 0.41, "+ x", va="center", fontsize=10)
    fig.suptitle(f"Tensor parallelism on {len(ranks)} ranks (SmolLM2-135M): two all-reduces per layer")
    fig.tight_layout()
    return fig


def _span(pair) -> str:
    start, end = pair
    return str(start) if end - start == 1 else f"{start}-{end - 1}"
