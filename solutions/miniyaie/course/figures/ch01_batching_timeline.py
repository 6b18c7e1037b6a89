"""Chapter 1: continuous batching with chunked prefill, drawn from the real scheduler on a stand-in model.

Every step the scheduler (miniyaie.scheduler) is asked for a batch under a
token budget; the "model" returns token 1 for every chunk that samples. The
figure shows, per request and step, a prefill chunk (with its token count)
or a decode token, and below, the tokens each step spent against the budget.
"""

from __future__ import annotations

NAME = "ch01_batching_timeline"
PAGE = "ch01_scheduler.md"
BUDGET = 16  # max_num_batched_tokens
SEATS = 3  # max_num_seqs
WORKLOAD = [  # (arrival step, prompt tokens, output tokens)
    (0, 6, 7), (0, 21, 4), (1, 3, 6), (2, 30, 3), (3, 5, 5), (4, 9, 4),
]


def data() -> dict:
    from miniyaie.scheduler import Request, Scheduler, SchedulerConfig, TokenCountingMemory

    config = SchedulerConfig(max_num_batched_tokens=BUDGET, max_num_seqs=SEATS)
    scheduler = Scheduler(config, TokenCountingMemory(1024))
    requests = [Request(f"r{i}", [1] * p, o, ignore_eos=True) for i, (_, p, o) in enumerate(WORKLOAD)]
    pending = list(zip([a for a, _, _ in WORKLOAD], requests))
    cells, step = [], 0  # (step, request index, "prefill" | "decode", tokens)
    while pending or scheduler.has_unfinished():
        for item in [item for item in pending if item[0] <= step]:
            scheduler.add_request(item[1])
            pending.remove(item)
        out = scheduler.schedule()
        for chunk in out.chunks:
            kind = "decode" if chunk.start >= len(chunk.request.prompt_token_ids) else "prefill"
            cells.append([step, int(chunk.request.request_id[1:]), kind, chunk.num_tokens])
        scheduler.update(out, {c.request.request_id: 1 for c in out.chunks if c.samples_next_token})
        step += 1
    return {"budget": BUDGET, "seats": SEATS, "workload": WORKLOAD, "cells": cells, "steps": step}


def draw(data: dict):
    from matplotlib.patches import Patch

    from miniyaie.course.figures import style

    colours = {"prefill": style.BLUE, "decode": style.ORANGE}
    fig, (top, bottom) = style.figure(6.8, nrows=2, sharex=True, gridspec_kw={"height_ratios": [3, 1.6]})
    workload, steps = data["workload"], data["steps"]
    last = {}
    for step, i, _, _ in data["cells"]:
        last[i] = max(last.get(i, 0), step)
    for i, (arrival, prompt, output) in enumerate(workload):
        top.barh(i, last[i] + 1 - arrival, left=arrival, height=0.8, color=style.LIGHT, edgecolor=style.GREY)
    for step, i, kind, tokens in data["cells"]:
        top.barh(i, 1, left=step, height=0.8, color=colours[kind], edgecolor="white")
        if kind == "prefill":
            top.text(step + 0.5, i, str(tokens), ha="center", va="center", color="white", fontsize=9.5, weight="bold")
    top.set_yticks(range(len(workload)), [f"r{i}: {p}+{o}" for i, (_, p, o) in enumerate(workload)])
    top.invert_yaxis()
    top.set_ylabel("request: prompt+output tokens")
    top.set_title(f"Continuous batching with chunked prefill: budget {data['budget']} tokens/step, "
                  f"at most {data['seats']} requests")
    fig.legend(handles=[Patch(color=style.BLUE, label="prefill chunk (number = its tokens)"),
                        Patch(color=style.ORANGE, label="decode: 1 token"),
                        Patch(facecolor=style.LIGHT, edgecolor=style.GREY, label="arrived, waiting for a seat")],
               loc="lower center", ncols=3, frameon=False)
    prefill, decode = [0] * steps, [0] * steps
    for step, _, kind, tokens in data["cells"]:
        (prefill if kind == "prefill" else decode)[step] += tokens
    xs = [s + 0.5 for s in range(steps)]
    bottom.bar(xs, decode, width=0.85, color=style.ORANGE)
    bottom.bar(xs, prefill, width=0.85, bottom=decode, color=style.BLUE)
    bottom.axhline(data["budget"], color=style.VERMILION, linestyle="--", linewidth=1.5)
    bottom.text(steps, data["budget"], " budget", va="center", color=style.VERMILION)
    bottom.set_ylabel("tokens in step")
    bottom.set_xlabel("engine step")
    bottom.set_xlim(0, steps)
    bottom.set_xticks(range(0, steps + 1))
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig
