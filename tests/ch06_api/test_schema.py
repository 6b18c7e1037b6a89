"""schemathesis against our own OpenAPI schema: generated (valid and invalid) requests never get a 5xx."""

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from server_helpers import MODEL

pytestmark = [pytest.mark.task(f"6.{n}") for n in range(1, 9)]  # end to end, but for own marks
EXAMPLES = 25  # per operation and per generation mode


def test_no_generated_request_gets_a_server_error(served):
    engine, server = served
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    paths = {op.path for op in operations}
    assert {"/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/metrics"} <= paths
    statuses: dict[str, set[int]] = {}
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
        def call(case):
            if isinstance(case.body, dict) and isinstance(case.body.get("model"), str):
                case.body["model"] = MODEL  # a random name would only ever test the 404
            response = case.call_and_validate(checks=[not_a_server_error], timeout=60)
            statuses.setdefault(operation.path, set()).add(response.status_code)

        call()
    print(statuses)
    # the generated cases reached the engine (200) and its validation (4xx), not only one of them
    assert 200 in statuses["/v1/chat/completions"] and any(400 <= s < 500 for s in statuses["/v1/chat/completions"])
    stats = engine.get_stats()
    assert stats["failed_steps"] == 0 and stats["kv_blocks"]["held_by_requests"] == 0
