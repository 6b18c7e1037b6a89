"""What a request asks of the output's shape, in OpenAI's and vLLM's words, as SamplingParams fields (chapter 8).

    response_format {"type": "json_schema", "json_schema": {"schema": S}}  -> json_schema=S
    response_format {"type": "json_object"}                                 -> any JSON object (nested 2 levels)
    structured_outputs {"regex" | "json" | "choice": ...}, guided_regex / guided_json / guided_choice (vLLM)

More than one of them is a 400, as is a schema or regex the engine cannot
compile (engine.prepare, on a worker thread, says which keyword or why).
"""

from __future__ import annotations

from miniyaie.api.errors import APIError
from miniyaie.engine import SamplingParams


def structured_fields(request) -> dict:
    """The regex / json_schema / choice a request asks for ({} for none)."""
    asked = []
    fmt = request.response_format
    if fmt is not None and fmt.type == "json_schema":
        if fmt.json_schema is None:
            raise APIError(400, "response_format of type json_schema needs a json_schema", param="response_format")
        asked.append(("response_format", {"json_schema": fmt.json_schema.schema_}))
    elif fmt is not None and fmt.type == "json_object":
        asked.append(("response_format", {"json_schema": "json_object"}))
    outputs = request.structured_outputs
    if outputs is not None:
        given = {k: v for k, v in (("regex", outputs.regex), ("json_schema", outputs.json_), ("choice", outputs.choice)) if v is not None}
        if len(given) != 1:
            raise APIError(400, "structured_outputs takes exactly one of regex, json and choice", param="structured_outputs")
        asked.append(("structured_outputs", given))
    for name, field in (("guided_regex", "regex"), ("guided_json", "json_schema"), ("guided_choice", "choice")):
        if getattr(request, name) is not None:
            asked.append((name, {field: getattr(request, name)}))
    if len(asked) > 1:
        raise APIError(400, f"ask for one output format, got {' and '.join(name for name, _ in asked)}", param=asked[1][0])
    return asked[0][1] if asked else {}


def with_structured_output(request, params: SamplingParams) -> SamplingParams:
    fields = structured_fields(request)
    return params.with_updates(**fields) if fields else params
