"""Chapter 5: one step of the engine loop, and what each piece owns (a diagram)."""

from __future__ import annotations

NAME = "ch05_engine_step"
PAGE = "ch05_engine.md"
STAGES = [  # (piece, call, what it does, what it owns)
    ("Scheduler", "schedule()", "who runs, how many\ntokens each", "waiting / running queues,\ntoken budget,\nKV blocks (ch. 2-3)"),
    ("ModelRunner", "run(out)", "one flat batch,\none forward pass", "the model's weights,\nthe KV pool,\nattention backend"),
    ("Sampler", "inside run", "logits -> one token\nper row, one pass", "each row's sampling\nparameters, seeded\ngenerators"),
    ("Scheduler", "update()", "append tokens, finish\n(EOS, max_tokens), free", "requests' tokens and\nnum_computed_tokens"),
    ("OutputProcessor", "on_event", "detokenize, stop\nstrings, n completions", "each request's text\nand detokenizer state"),
    ("sink", "put -> caller", "stream deltas, then\nthe final result", "the queue to one\ncaller (thread or\ncoroutine)"),
]


def data() -> dict:
    return {"stages": [list(stage) for stage in STAGES]}


def draw(data: dict):
    from miniyaie.course.figures import style

    stages = data["stages"]
    colours = [style.SKY, style.BLUE, style.BLUE, style.SKY, style.ORANGE, style.YELLOW]
    fig, ax = style.figure(3.9)
    w, gap = 1.5, 0.28
    total = len(stages) * (w + gap) - gap
    style.blank(ax, (-0.1, total + 0.1), (-2.05, 1.75))
    for i, (piece, call, does, owns) in enumerate(stages):
        x = i * (w + gap)
        style.box(ax, x, 0.3, w, 0.95, f"{piece}\n{call}", colour=colours[i], fontsize=9.5)
        ax.texts[-1].set_color("white" if colours[i] == style.BLUE else "black")
        ax.texts[-1].set_weight("bold")
        ax.text(x + w / 2, 0.18, does, ha="center", va="top", fontsize=8.8)
        ax.text(x + w / 2, -0.5, "owns:\n" + owns, ha="center", va="top", fontsize=9, color="#333333", style="italic")
        if i + 1 < len(stages):
            style.arrow(ax, (x + w, 0.78), (x + w + gap, 0.78))
    step_end = 4 * (w + gap) - gap
    ax.annotate("", (0, 1.45), (step_end, 1.45), arrowprops={"arrowstyle": "|-|", "color": style.VERMILION})
    ax.text(step_end / 2, 1.58, "LLMEngine.step(): token ids in, (request, token, finish) events out",
            ha="center", fontsize=9.5, color=style.VERMILION)
    ax.annotate("", (step_end + gap, 1.45), (total, 1.45), arrowprops={"arrowstyle": "|-|", "color": style.PURPLE})
    ax.text((step_end + gap + total) / 2, 1.58, "engine thread: text to callers", ha="center", fontsize=9.5,
            color=style.PURPLE)
    style.arrow(ax, (total - w / 2, -1.72), (w / 2, -1.72), colour="#555555", style="-|>")
    ax.text(total / 2, -1.95, "next step (the loop sleeps when nothing is waiting or running)", ha="center",
            fontsize=9.5, color="#555555")
    ax.set_title("One engine step: schedule, run the model, sample, update, detokenize, stream")
    fig.tight_layout()
    return fig
