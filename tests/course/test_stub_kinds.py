"""A stub keeps its function's kind: a generator stays a generator, a coroutine a coroutine (not graded)."""

import asyncio

import pytest

from miniyaie.course import sync
from miniyaie.course.regions import find_regions, function_kinds, stub_regions

pytestmark = pytest.mark.ungraded

PAGE = "book/src/ch06_api.md"
SOURCE = '''\
async def events(items):
    # BEGIN SOLUTION 6.4: Stream
    async for item in items:
        yield item
    # END SOLUTION


def numbers(n):
    # BEGIN SOLUTION 6.5: Count
    yield from range(n)
    # END SOLUTION


def halves(xs):
    yield "start"
    # BEGIN SOLUTION 6.6: Halve
    for x in xs:
        yield x / 2
    # END SOLUTION


async def total(xs):
    # BEGIN SOLUTION 6.7: Sum
    def inner():
        yield 1
    return sum(xs)
    # END SOLUTION


class Box:
    def plain(self):
        # BEGIN SOLUTION 6.8: Plain
        return 1
        # END SOLUTION
'''


def stubbed_module():
    text = stub_regions(SOURCE, find_regions(SOURCE, "api/x.py"), PAGE)
    namespace = {}
    exec(compile(text, "api/x.py", "exec"), namespace)
    return text, namespace


def test_every_stubbed_function_keeps_its_kind():
    text, _ = stubbed_module()
    solution = function_kinds(SOURCE)
    assert solution == {"events": "async generator", "numbers": "generator", "halves": "generator",
                        "total": "coroutine", "total.<locals>.inner": "generator", "Box.plain": "function"}
    stub = function_kinds(text)
    assert {name: stub[name] for name in stub} == {k: v for k, v in solution.items() if "<locals>" not in k}
    # a yield is added only where the region held every yield of its function
    assert text.count("yield  # never runs") == 2


def test_an_async_generator_stub_names_its_task_when_iterated():
    _, namespace = stubbed_module()

    async def consume():
        return [item async for item in namespace["events"](None)]

    with pytest.raises(NotImplementedError, match="Chapter 6, Task 4: Stream — see book/src/ch06_api.md"):
        asyncio.run(consume())
    with pytest.raises(NotImplementedError, match="Chapter 6, Task 5: Count"):
        list(namespace["numbers"](3))
    with pytest.raises(NotImplementedError, match="Chapter 6, Task 7: Sum"):
        asyncio.run(namespace["total"]([1]))


def test_course_check_reports_a_stub_that_changes_its_functions_kind():
    tree = sync.generated_tree()
    assert sync.kind_changes(tree) == []
    broken = tree["api/streaming.py"].replace("    yield  # never runs", "    pass  # never runs", 1)  # event_stream's
    problems = sync.kind_changes({**tree, "api/streaming.py": broken})
    assert problems == ["stub changes a function's kind: api/streaming.py:event_stream "
                        "(solution: async generator, stub: coroutine)"]
