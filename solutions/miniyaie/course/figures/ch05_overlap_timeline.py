"""The performance chapter: the plain loop against overlap scheduling, as a timeline (a model, not a measurement).

Each step has host work (schedule, pack, record the tokens, the caller's
detokenizing) and device work (the forward pass and the sampler). The plain
loop runs them one after the other. Overlapped, the host schedules step N
and launches it once the device has finished N-1 (one step in flight at
most), then records N-1 and does the caller's work while N runs: in the
steady state a step costs the longer of the two. The durations are chapter
4's batch-1 decode step on an H100 with CUDA graphs: 1.84 ms of wall time,
of which 1.13 ms kept the GPU busy, leaving 0.71 ms of host work. How that
host work splits around the launch is assumed (half before, half after); the
steady state does not depend on it.
"""

from __future__ import annotations

NAME = "ch05_overlap_timeline"
PAGE = "ch05_performance.md"
HOST_MS, DEVICE_MS = 0.71, 1.13
BEFORE_LAUNCH = 0.5  # the share of the host's work done before it launches a step (schedule, pack)
STEPS = 5


def data() -> dict:
    before, after = HOST_MS * BEFORE_LAUNCH, HOST_MS * (1 - BEFORE_LAUNCH)
    plain_host, plain_device, over_host, over_device = [], [], [], []
    t = 0.0
    for step in range(STEPS):  # plain: schedule and pack N, run N, record N, then the next
        plain_host.append(["s", step, round(t, 3), round(before, 3)])
        plain_device.append(["", step, round(t + before, 3), DEVICE_MS])
        plain_host.append(["r", step, round(t + before + DEVICE_MS, 3), round(after, 3)])
        t += HOST_MS + DEVICE_MS
    host_free, device_free = 0.0, 0.0
    for step in range(STEPS):  # overlapped: launch N once scheduled and once N-1 is off the device
        launch = max(host_free + before, device_free)
        over_host.append(["s", step, round(host_free, 3), round(before, 3)])
        if step:
            over_host.append(["r", step - 1, round(launch, 3), round(after, 3)])  # record N-1 while N runs
        over_device.append(["", step, round(launch, 3), DEVICE_MS])
        device_free, host_free = launch + DEVICE_MS, launch + after
    over_host.append(["r", STEPS - 1, round(device_free, 3), round(after, 3)])  # the last step has no successor
    return {"host_ms": HOST_MS, "device_ms": DEVICE_MS, "plain": [plain_host, plain_device],
            "overlap": [over_host, over_device], "plain_end": round(t, 3), "overlap_end": round(device_free + after, 3)}


def draw(data: dict):
    from matplotlib.patches import Patch

    from miniyaie.course.figures import style

    fig, ax = style.figure(4.0)
    lanes = [("plain loop: host", data["plain"][0], style.ORANGE), ("plain loop: GPU", data["plain"][1], style.BLUE),
             ("overlapped: host", data["overlap"][0], style.ORANGE), ("overlapped: GPU", data["overlap"][1], style.BLUE)]
    for y, (_, spans, colour) in enumerate(lanes):
        for kind, step, start, length in spans:
            fill = style.VERMILION if kind == "r" else colour
            ax.barh(y, length, left=start, height=0.7, color=fill, edgecolor="white")
            ax.text(start + length / 2, y, f"{kind}{step}", ha="center", va="center", color="white", weight="bold")
    ax.set_yticks(range(len(lanes)), [name for name, _, _ in lanes])
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    for y, end in ((0, data["plain_end"]), (2, data["overlap_end"])):
        ax.annotate(f"{end:.2f} ms", (end, y), xytext=(6, 0), textcoords="offset points", va="center")
    ax.set_xlim(0, data["plain_end"] * 1.1)
    ax.set_title(f"Five decode steps, plain and overlapped (model: {data['host_ms']} ms host + "
                 f"{data['device_ms']} ms GPU a step)")
    fig.legend(handles=[Patch(color=style.ORANGE, label="sN: the host schedules step N"),
                        Patch(color=style.BLUE, label="N: the GPU runs step N (forward, sampler)"),
                        Patch(color=style.VERMILION, label="rN: the host records step N, detokenizes")],
               loc="lower center", ncols=3, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig
