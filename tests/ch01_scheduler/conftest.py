"""The scheduler's tests run in milliseconds to seconds: a learner's infinite loop fails in 60 s, not 15 min."""

import pytest

SCHEDULER_TEST_LIMIT_S = 60  # the slowest honest test here takes ~5 s on 2 busy cores


def pytest_collection_modifyitems(config, items):
    if config.getoption("timeout", None) is not None:
        return  # pytest --timeout=SECONDS given: it decides
    for item in items:
        if "ch01_scheduler" in item.nodeid and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SCHEDULER_TEST_LIMIT_S))
