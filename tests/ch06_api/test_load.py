"""Load and faults: 64 concurrent streaming clients, a quarter hanging up at random points.

Every survivor's text must equal the offline engine's greedy output for its
prompt; afterwards no request holds a KV block, the radix cache's integrity
check holds, and /health is ok.
"""

import asyncio
import json
import random

import httpx
import pytest
from server_helpers import MODEL, start_server, wait_until_idle

pytestmark = [pytest.mark.task(f"6.{n}") for n in range(1, 9)]  # end to end, but for own marks
CLIENTS, MAX_TOKENS = 64, 12
WORDS = "the engine cache token block tree page batch hello world small capital France Paris sky sea".split()


async def stream_one(url: str, body: dict, hang_up_after: int | None) -> str | None:
    """The streamed text, or None after hanging up once `hang_up_after` events arrived."""
    text, events = [], 0
    async with httpx.AsyncClient(timeout=120) as client:
        async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as reply:
            assert reply.status_code == 200
            async for line in reply.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                events += 1
                if hang_up_after is not None and events > hang_up_after:
                    return None  # leaving the `async with` closes the connection mid-stream
                for choice in json.loads(line[6:])["choices"]:
                    text.append(choice["delta"].get("content") or "")
    return "".join(text)


async def crowd(url: str, bodies: list[dict], hang_ups: list[int | None]) -> list[str | None]:
    return await asyncio.gather(*(stream_one(url, b, h) for b, h in zip(bodies, hang_ups)))


def test_64_streaming_clients_with_a_quarter_hanging_up(tiny_loaded):
    rng = random.Random(0)
    # a pool smaller than the crowd needs at once: admission waits, and preemption may happen
    engine, server = start_server(tiny_loaded, num_blocks=160)
    try:
        questions = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12))) for _ in range(CLIENTS)]
        questions[1] = questions[0]  # a shared prompt: the prefix cache is in play too
        bodies = [{"model": MODEL, "messages": [{"role": "user", "content": q}], "max_tokens": MAX_TOKENS,
                   "stream": True, "ignore_eos": True, "temperature": 0} for q in questions]
        quitters = set(rng.sample(range(CLIENTS), CLIENTS // 4))
        hang_ups = [rng.randint(0, MAX_TOKENS // 3) if i in quitters else None for i in range(CLIENTS)]
        texts = asyncio.run(crowd(server.url, bodies, hang_ups))

        stats = wait_until_idle(engine)
        offline = engine.generate([engine.render_chat(b["messages"])[0] for b in bodies], max_tokens=MAX_TOKENS,
                                  ignore_eos=True)
        for i, (text, expected) in enumerate(zip(texts, offline)):
            if i not in quitters:
                assert text == expected.text, f"client {i}"
        assert sum(t is None for t in texts) == len(quitters)
        assert stats["kv_blocks"]["held_by_requests"] == 0
        assert stats["kv_blocks"]["used"] == stats["kv_blocks"]["cache_only"]  # what is left is the prefix cache's
        engine.llm.memory.check_integrity()
        assert httpx.get(f"{server.url}/health").json()["status"] == "ok"
    finally:
        server.__exit__(None, None, None)
        engine.close()
