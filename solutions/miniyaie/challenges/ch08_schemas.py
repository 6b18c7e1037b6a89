"""Chapter 8's challenge: small automata for real schemas.

Every state of a schema's byte automaton is a row of the token index: a
walk of the whole vocabulary when decoding first reaches it, and a mask in
memory after. Six schemas of the kind clients send (tool calls, extraction
records, arrays of objects, enums, a date pattern) go through your
`schema_to_regex` and `compile_regex`. Score: their byte states in total
(deterministic); the seconds are printed too. Your lever is your whole
structured/ package (the regexes, the automaton, anything after it), under
every test of the chapter. Baseline: the automata as the chapter's tasks
build them (the reference tree; a direct answer scores the same). The
reference's entry is in solutions/miniyaie/structured/challenge.py (the reference column runs it).
"""

from __future__ import annotations

import time

from miniyaie.challenges.base import Challenge

SCHEMAS = {
    "weather tool call": {
        "type": "object", "required": ["location", "unit"],
        "properties": {"location": {"type": "string", "maxLength": 40},
                       "unit": {"enum": ["celsius", "fahrenheit"]},
                       "days": {"type": "integer"}}},
    "person": {
        "type": "object", "required": ["name", "age", "email"],
        "properties": {"name": {"type": "string", "maxLength": 30}, "age": {"type": "integer"},
                       "email": {"type": "string", "maxLength": 40},
                       "member": {"type": "boolean"}}},
    "order with items": {
        "type": "object", "required": ["id", "items"],
        "properties": {"id": {"type": "string", "maxLength": 12},
                       "items": {"type": "array", "minItems": 1, "maxItems": 3, "items": {
                           "type": "object", "required": ["sku", "quantity"],
                           "properties": {"sku": {"type": "string", "maxLength": 10},
                                          "quantity": {"type": "integer"}}}},
                       "paid": {"type": "boolean"}}},
    "sentiment": {
        "type": "object", "required": ["label", "confidence"],
        "properties": {"label": {"enum": ["positive", "negative", "neutral"]},
                       "confidence": {"type": "number"}}},
    "search query": {
        "type": "object", "required": ["query"],
        "properties": {"query": {"type": "string", "maxLength": 60},
                       "filters": {"type": "array", "maxItems": 4, "items": {"type": "string", "maxLength": 15}},
                       "limit": {"type": "integer"}}},
    "calendar event": {
        "type": "object", "required": ["title", "start", "attendees"],
        "properties": {"title": {"type": "string", "maxLength": 40},
                       "start": {"type": "string", "pattern": r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}"},
                       "attendees": {"type": "array", "maxItems": 5, "items": {"type": "string", "maxLength": 20}},
                       "online": {"type": "boolean"}}},
}


def states() -> dict[str, float]:
    """Each schema through your schema_to_regex and compile_regex: its byte states and seconds."""
    from miniyaie.structured.fsm import compile_regex
    from miniyaie.structured.json_schema import schema_to_regex

    out = {}
    for name, schema in SCHEMAS.items():
        started = time.perf_counter()
        dfa = compile_regex(schema_to_regex(schema), built=True)
        out[f"{name} states"] = int(dfa.next_state.shape[0])
        out["seconds"] = out.get("seconds", 0.0) + time.perf_counter() - started
    out["states"] = sum(v for k, v in out.items() if k.endswith(" states"))
    return out


def reference() -> float:
    """The reference's entry (solutions/miniyaie/structured/challenge.py, run with the reference tree selected): its
    count of the six schemas' states in total."""
    from miniyaie.structured.challenge import reference_states
    from miniyaie.structured.fsm import compile_regex
    from miniyaie.structured.json_schema import schema_to_regex

    return float(sum(reference_states(compile_regex(schema_to_regex(schema), built=True)) for schema in SCHEMAS.values()))


def run() -> float:
    """Your automata of the six schemas: their byte states in total."""
    return float(states()["states"])


CHALLENGE = Challenge(
    number=8,
    title="small automata for real schemas",
    metric="byte-automaton states of six schemas",
    unit="states",
    higher_is_better=False,
    workload=("six schemas of the kind clients send (tool calls, records, an array of objects, enums, "
              "a date pattern) through your schema_to_regex and compile_regex"),
    run=run,
    baseline=run,  # the reference tree's automata, as the chapter's tasks build them
    reference=reference,
    correctness_tests=["tests/ch08_structured_output"],  # a challenge entry can change anything the chapter compiles
    extra={"baseline_label": "the chapter's automata, as its tasks build them (reference tree)"},
    note=("Deterministic: the same on every machine. Baseline: the automata as the chapter's tasks build them; "
          "reference: solutions/miniyaie/structured/challenge.py, once you have a score of your own."),
)
