"""Server-sent events: how a stream of JSON chunks travels over one HTTP response.

Each event is a `data: <one line of JSON>` line and an empty line; the
stream ends with the sentinel `data: [DONE]` (OpenAI's convention, which
its clients wait for).
"""

from __future__ import annotations

import json

DONE = "[DONE]"


# ANCHOR: sse_event
def sse_event(payload: dict | str) -> str:
    """One SSE event: `data: ` + the payload (a dict as compact JSON, a string as is) + a blank line.

    The event is exactly one `data:` line: a dict whose strings hold newlines
    must not break it into several lines. Non-ASCII text is sent as itself
    (UTF-8), not as \\u escapes.
    """
    # Nudge: an event is one line of data and an empty line; JSON can keep any dict on one line.
    # Hint 1: A newline inside the data would end the data line early; the blank line is what
    #   ends an event. JSON escapes newlines inside strings, so a dict serialised as JSON is
    #   always one line; a string payload (the [DONE] sentinel) is sent as it is.
    # Hint 2: Serialise a dict with json.dumps, compactly and without forcing ASCII; leave a str
    #   alone. Return "data: " + that + two newlines.
    # Hint 3:
    #   data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    #   return f"data: {data}\n\n"
    # BEGIN SOLUTION 6.7: Stream server-sent events, abort on disconnect
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    return f"data: {data}\n\n"
    # END SOLUTION
# ANCHOR_END: sse_event


def sse_done() -> str:
    return sse_event(DONE)
