"""Chapter 5's loop page: one engine thread serving three callers, on a modelled clock.

The batches are the real scheduler's (miniyaie.scheduler, a stand-in model
that samples token 1); the clock is a model, stated on the figure: a step
costs STEP_MS plus PER_TOKEN_MS per token it carries. Callers submit at
fixed times; the thread sleeps on its condition variable while there is
nothing to do and wakes at the submission; each step's tokens reach their
callers' sinks when the step ends.
"""

from __future__ import annotations

NAME = "ch05_engine_loop_timeline"
PAGE = "ch05_engine_loop.md"
STEP_MS, PER_TOKEN_MS = 12.0, 0.25
BUDGET = 32  # max_num_batched_tokens
CALLERS = [  # (caller, submitted at ms, prompt tokens, output tokens)
    ("A", 0.0, 48, 4), ("B", 30.0, 20, 3), ("C", 150.0, 12, 3),
]


def data() -> dict:
    from miniyaie.scheduler import Request, Scheduler, SchedulerConfig, TokenCountingMemory

    scheduler = Scheduler(SchedulerConfig(max_num_batched_tokens=BUDGET, max_num_seqs=8), TokenCountingMemory(1024))
    pending = sorted((at, Request(name, [1] * prompt, out, ignore_eos=True)) for name, at, prompt, out in CALLERS)
    now, steps, sleeps, events = 0.0, [], [], []  # steps: [start, end, tokens, requests]; events: [caller, ms, kind]
    while pending or scheduler.has_unfinished():
        if not scheduler.has_unfinished() and pending[0][0] > now:
            sleeps.append([now, pending[0][0]])  # asleep on the condition variable until a submission wakes it
            now = pending[0][0]
        while pending and pending[0][0] <= now:  # the inbox, drained between two steps
            at, request = pending.pop(0)
            scheduler.add_request(request)
            events.append([request.request_id, at, "submit"])
        out = scheduler.schedule()
        tokens = sum(chunk.num_tokens for chunk in out.chunks)
        end = now + STEP_MS + PER_TOKEN_MS * tokens
        steps.append([now, end, tokens, sorted(chunk.request.request_id for chunk in out.chunks)])
        sampled = {c.request.request_id: 1 for c in out.chunks if c.samples_next_token}
        scheduler.update(out, sampled)
        for rid in sorted(sampled):
            events.append([rid, end, "token"])
        for chunk in out.chunks:
            if chunk.request.is_finished:
                events.append([chunk.request.request_id, end, "done"])
        now = end
    return {"callers": CALLERS, "step_ms": STEP_MS, "per_token_ms": PER_TOKEN_MS, "budget": BUDGET,
            "steps": steps, "sleeps": sleeps, "events": events}


def draw(data: dict):
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    from miniyaie.course.figures import style

    fig, ax = style.figure(3.9)
    names = [name for name, *_ in data["callers"]]
    thread = len(names)
    for start, end, tokens, requests in data["steps"]:
        ax.barh(thread, end - start, left=start, height=0.6, color=style.BLUE, edgecolor="white")
        ax.text((start + end) / 2, thread, str(tokens), ha="center", va="center", color="white", fontsize=9,
                weight="bold")
    for start, end in data["sleeps"]:
        ax.barh(thread, end - start, left=start, height=0.6, color=style.LIGHT, edgecolor=style.GREY, hatch="//")
    marks = {"submit": ("v", style.VERMILION, 9), "token": ("o", style.ORANGE, 7), "done": ("s", style.GREEN, 8)}
    for name, at, kind in data["events"]:
        row = names.index(name)
        marker, colour, size = marks[kind]
        ax.plot(at, row, marker=marker, color=colour, markersize=size, linestyle="none", zorder=3)
    for row, (name, at, prompt, out) in enumerate(data["callers"]):
        done = max(ms for n, ms, kind in data["events"] if n == name and kind == "done")
        ax.plot([at, done], [row, row], color=style.GREY, linewidth=1, zorder=1)
    ax.set_yticks(range(thread + 1), [f"caller {n}: {p}+{o} tokens" for n, _, p, o in data["callers"]]
                  + ["engine thread"])
    ax.invert_yaxis()
    ax.set_xlabel(f"time (ms, modelled: a step costs {data['step_ms']:g} ms + {data['per_token_ms']:g} ms per token)")
    ax.set_title(f"One engine thread, three callers: steps of the real scheduler (budget {data['budget']} tokens)")
    ax.legend(handles=[Patch(color=style.BLUE, label="step (number = its tokens)"),
                       Patch(facecolor=style.LIGHT, edgecolor=style.GREY, hatch="//", label="asleep: nothing to do"),
                       Line2D([], [], marker="v", color=style.VERMILION, linestyle="none", label="submit"),
                       Line2D([], [], marker="o", color=style.ORANGE, linestyle="none", label="token in the sink"),
                       Line2D([], [], marker="s", color=style.GREEN, linestyle="none", label="finished")],
              loc="upper center", bbox_to_anchor=(0.5, -0.22), ncols=5, frameon=False)
    fig.tight_layout()
    return fig
