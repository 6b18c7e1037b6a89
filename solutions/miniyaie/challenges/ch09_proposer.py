"""Chapter 9's challenge: a proposer whose drafts the model keeps more often, on a code-editing trace.

Each request shows a file and asks for it back with one edit; the answer is
the edited file, as a model that edits perfectly would write it greedily.
Replaying it needs no model: with greedy decoding a draft is kept exactly
when it equals the answer's next token, so the score is the same on every
machine. Score: tokens per verify step (1.0 = no speculation, 5.0 = every
one of the 4 drafts kept at every step), with your NgramProposer built as
the engine builds it (prompt_lookup_min=1, prompt_lookup_max=3, 4 drafts).
"""

from __future__ import annotations

import random
import re

from miniyaie.challenges.base import Challenge

FILES = [
    '''class Inventory:
    def __init__(self, items=None):
        self.items = dict(items or {})
        self.history = []

    def add(self, name, count=1):
        if count <= 0:
            raise ValueError(f"count must be positive, got {count}")
        self.items[name] = self.items.get(name, 0) + count
        self.history.append(("add", name, count))

    def remove(self, name, count=1):
        if count <= 0:
            raise ValueError(f"count must be positive, got {count}")
        if self.items.get(name, 0) < count:
            raise KeyError(f"not enough {name}: have {self.items.get(name, 0)}, need {count}")
        self.items[name] = self.items.get(name, 0) - count
        self.history.append(("remove", name, count))

    def total(self):
        return sum(self.items.values())

    def report(self):
        lines = []
        for name, count in sorted(self.items.items()):
            lines.append(f"{name}: {count}")
        return "\\n".join(lines)
''',
    '''def parse_config(text):
    config = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "=" not in line:
            raise ValueError(f"line {number}: expected key = value, got {line!r}")
        key, value = (part.strip() for part in line.split("=", 1))
        if value.isdigit():
            config[key] = int(value)
        elif value.lower() in ("true", "false"):
            config[key] = value.lower() == "true"
        else:
            config[key] = value
    return config


def merge_configs(base, override):
    merged = dict(base)
    for key, value in override.items():
        if key in merged and isinstance(merged[key], dict) and isinstance(value, dict):
            merged[key] = merge_configs(merged[key], value)
        else:
            merged[key] = value
    return merged


def check_config(config, required):
    missing = [key for key in required if key not in config]
    if missing:
        raise KeyError(f"missing keys: {', '.join(missing)}")
    return config
''',
    '''async def fetch_all(client, urls, limit=8):
    semaphore = asyncio.Semaphore(limit)
    results = {}

    async def fetch_one(url):
        async with semaphore:
            response = await client.get(url, timeout=10)
            response.raise_for_status()
            results[url] = response.json()

    await asyncio.gather(*(fetch_one(url) for url in urls))
    return results


async def fetch_pages(client, base_url, pages, limit=8):
    urls = [f"{base_url}?page={page}" for page in range(1, pages + 1)]
    results = await fetch_all(client, urls, limit=limit)
    items = []
    for url in urls:
        items.extend(results[url]["items"])
    return items


async def fetch_users(client, base_url, user_ids, limit=8):
    urls = [f"{base_url}/users/{user_id}" for user_id in user_ids]
    results = await fetch_all(client, urls, limit=limit)
    return [results[url] for url in urls]
''',
]

TOKEN = re.compile(r"[A-Za-z_]+|\d+|\n|[ ]+|[^\sA-Za-z_\d]")
INSTRUCTIONS = [
    "Rename {old} to {new} everywhere.",
    "Add a docstring to the first function.",
    "Delete the line that mentions {old}.",
    "Change every {old} to {new}.",
]


def _edit(source: str, rng: random.Random) -> tuple[str, str]:
    """One seeded edit of `source`: (instruction, edited source)."""
    words = sorted({w for w in re.findall(r"[a-z_]{4,}", source) if source.count(w) >= 3})
    kind = rng.randrange(4)
    if kind in (0, 3):
        old = rng.choice(words)
        new = old + "_" + rng.choice(["new", "v2", "map", "set"])
        return INSTRUCTIONS[kind].format(old=old, new=new), re.sub(rf"\b{old}\b", new, source)
    lines = source.split("\n")
    if kind == 1:
        first = next(i for i, line in enumerate(lines) if line.lstrip().startswith(("def ", "async def ")))
        indent = " " * (len(lines[first]) - len(lines[first].lstrip()) + 4)
        docstring = rng.choice(["Do the work.", "See the module docstring.", "Part of the public API."])
        lines.insert(first + 1, f'{indent}"""{docstring}"""')
        return INSTRUCTIONS[1], "\n".join(lines)
    candidates = [i for i, line in enumerate(lines) if "raise" in line or "append" in line]
    i = rng.choice(candidates)
    word = re.findall(r"[a-z_]{4,}", lines[i])[0]
    del lines[i]
    return INSTRUCTIONS[2].format(old=word), "\n".join(lines)


def tokenize(text: str, vocabulary: dict[str, int]) -> list[int]:
    """Token ids of a crude code tokenizer (words, numbers, runs of spaces, single symbols)."""
    return [vocabulary.setdefault(piece, len(vocabulary)) for piece in TOKEN.findall(text)]


def trace(requests: int = 24, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, the answer's ids) per request: the answer is what a greedy model that edits perfectly writes."""
    rng = random.Random(seed)
    vocabulary: dict[str, int] = {}
    out = []
    for r in range(requests):
        source = FILES[r % len(FILES)]
        instruction, edited = _edit(source, rng)
        prompt = f"{instruction}\n```python\n{source}```\n"
        out.append((tokenize(prompt, vocabulary), tokenize(f"```python\n{edited}```", vocabulary)))
    return out


def replay(propose, requests, k: int = 4) -> dict[str, float]:
    """Greedy speculative decoding against recorded answers: a draft is kept while it equals the answer's next token.

    Each verify step keeps the longest run of drafts that match and adds one token of its own (the
    model's next token after them), as the acceptance rule does for greedy requests.
    """
    steps = drafted = accepted = generated = 0
    for prompt, answer in requests:
        position = 0
        while position < len(answer):
            drafts = list(propose(prompt + answer[:position], min(k, len(answer) - position - 1)))[:k]
            kept = 0
            while kept < len(drafts) and position + kept < len(answer) and drafts[kept] == answer[position + kept]:
                kept += 1
            drafted += len(drafts)
            accepted += kept
            position += kept + 1
            steps += 1
        generated += len(answer)
    return {"tokens_per_step": generated / steps, "acceptance": accepted / max(drafted, 1),
            "steps": steps, "generated": generated}


K, MIN_N, MAX_N = 4, 1, 3  # the engine's defaults: num_speculative_tokens, prompt_lookup_min, prompt_lookup_max


def first_unigram(token_ids, k: int) -> list[int]:
    """The baseline: the tokens after the first earlier occurrence of the last token."""
    last = token_ids[-1] if token_ids else None
    for e in range(len(token_ids) - 1):
        if token_ids[e] == last:
            return list(token_ids[e + 1 : e + 1 + k])
    return []


def run() -> float:
    """Your NgramProposer on the trace (the selected tree): tokens per verify step."""
    from miniyaie.speculative.ngram import NgramProposer

    return replay(NgramProposer(MIN_N, MAX_N).propose, trace(), K)["tokens_per_step"]


def baseline() -> float:
    return replay(first_unigram, trace(), K)["tokens_per_step"]


CHALLENGE = Challenge(
    number=9,
    title="a proposer whose drafts the model keeps more often",
    metric="tokens per verify step",
    unit="tokens; 1.0 = no draft kept, 5.0 = all 4 kept",
    higher_is_better=True,
    workload=("24 seeded code-editing requests (a file and one edit; the answer is the edited file, "
              f"replayed as greedy decoding: a draft is kept when it equals the answer's next token), "
              f"NgramProposer({MIN_N}, {MAX_N}) with {K} drafts, as the engine builds it"),
    run=run,
    baseline=baseline,
    correctness_tests=["tests/ch09_speculative/test_ngram.py"],
    note=("Deterministic: the same on every machine. "
          "Baseline: the tokens after the first earlier occurrence of the last token."),
)
