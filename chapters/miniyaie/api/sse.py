"""Server-sent events: how a stream of JSON chunks travels over one HTTP response.

Each event is a `data: <one line of JSON>` line and an empty line; the
stream ends with the sentinel `data: [DONE]` (OpenAI's convention, which
its clients wait for).
"""

from __future__ import annotations


DONE = "[DONE]"


# ANCHOR: sse_event
def sse_event(payload: dict | str) -> str:
    """One SSE event: `data: ` + the payload (a dict as compact JSON, a string as is) + a blank line.

    The event is exactly one `data:` line: a dict whose strings hold newlines
    must not break it into several lines. Non-ASCII text is sent as itself
    (UTF-8), not as \\u escapes.
    """
    # Idea: an event is one line of data and an empty line; JSON can keep any dict on one line.
    # Stuck? `miniyaie hint 6.7` prints hints, one level at a time.
    # TODO(Task 6.7): Stream server-sent events, abort on disconnect. Replace this line with your code.
    raise NotImplementedError('Chapter 6, Task 7: Stream server-sent events, abort on disconnect — see book/src/ch06_api.md')
# ANCHOR_END: sse_event


def sse_done() -> str:
    return sse_event(DONE)
