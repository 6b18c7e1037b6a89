"""`miniyaie serve --rag DIR`: answer with passages of your own documents in the prompt.

Retrieval is BM25 (Robertson and Zaragoza's ranking function, what search
engines used before embeddings): a passage scores high when it contains the
query's rare words, often, without being long. No model, no dependency:
a few dictionaries built once at startup. A `ModelAdapter` (the engine's
hook that rewrites every prompt before it is tokenized, chapter 5) puts the
best passages in front of each prompt.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from miniyaie.engine import ModelAdapter

WORD = re.compile(r"[a-z0-9]+")
SUFFIXES = ("ing", "ed", "es", "s")
MDBOOK_DIRECTIVE = re.compile(r"\{\{#[^}]*\}\}|^- \*\*(File|Run|Tests):\*\*.*$", re.M)  # includes, task metadata


def tokenize(text: str) -> list[str]:
    """Lower-case words, with a crude plural/tense suffix cut so 'blocks' finds 'block'."""
    words = []
    for word in WORD.findall(text.lower()):
        for suffix in SUFFIXES:
            if len(word) > len(suffix) + 2 and word.endswith(suffix):
                word = word[: -len(suffix)]
                break
        words.append(word)
    return words


@dataclass(frozen=True)
class Passage:
    source: str  # file name relative to the folder
    text: str


def split_passages(source: str, text: str, max_words: int = 120) -> list[Passage]:
    """Paragraphs (blank-line separated) with their heading, long ones cut at max_words; mdBook directives left out."""
    passages = []
    text = MDBOOK_DIRECTIVE.sub("", text)  # file names and commands, not content
    heading = ""
    for paragraph in re.split(r"\n\s*\n", text):
        if paragraph.strip().startswith("#") and "\n" not in paragraph.strip():
            heading = paragraph.strip().lstrip("#").strip() + ": "  # a heading belongs to what follows it
            continue
        words = (heading + paragraph).split()
        heading = ""
        for start in range(0, len(words), max_words):
            chunk = " ".join(words[start : start + max_words])
            if tokenize(chunk):
                passages.append(Passage(source, chunk))
    return passages


# ANCHOR: bm25
class Retriever:
    """BM25 over passages: `search(query, k)` returns the k best (score > 0), best first."""

    def __init__(self, passages: list[Passage], k1: float = 1.5, b: float = 0.75):
        """Index `passages` (their terms are `tokenize(text)`) once, for many searches.

        Keeps `passages` (a list, in the order given), `k1` and `b`. Whatever
        else it keeps is the index `score` reads: a score must not tokenize or
        scan a passage's text again.
        """
        self.passages, self.k1, self.b = list(passages), k1, b
        # Idea: a score is called for every passage of every query: keep what it needs, counted once.
        # Stuck? `miniyaie hint 6.8` prints hints, one level at a time.
        # TODO(Task 6.8): A BM25 index and its score. Replace this line with your code.
        raise NotImplementedError('Chapter 6, Task 8: A BM25 index and its score — see book/src/ch06_api.md')

    @classmethod
    def from_folder(cls, folder: str | Path, **kwargs) -> Retriever:
        """Every .md and .txt file under `folder`, split into passages."""
        root = Path(folder)
        if not root.is_dir():
            raise FileNotFoundError(f"--rag: {folder} is not a folder")
        passages = []
        for path in sorted(p for p in root.rglob("*") if p.suffix in (".md", ".txt") and p.is_file()):
            passages += split_passages(path.relative_to(root).as_posix(), path.read_text(errors="replace"))
        if not passages:
            raise FileNotFoundError(f"--rag: no .md or .txt text under {folder}")
        return cls(passages, **kwargs)

    def score(self, query_terms: list[str], index: int) -> float:
        """The BM25 score (the page's formula, with this retriever's k1 and b) of passage `index` for a query.

        A term the query repeats counts once; a term the passage lacks adds
        nothing; a passage sharing no term with the query scores 0.
        """
        # Idea: rare terms weigh more, repeats saturate, long passages are discounted.
        # Stuck? `miniyaie hint 6.8` prints hints, one level at a time.
        # TODO(Task 6.8): A BM25 index and its score. Replace this line with your code.
        raise NotImplementedError('Chapter 6, Task 8: A BM25 index and its score — see book/src/ch06_api.md')
    # ANCHOR_END: bm25

    def search(self, query: str, k: int = 3) -> list[tuple[float, Passage]]:
        terms = tokenize(query)
        scored = [(self.score(terms, i), i) for i in range(len(self.passages))]
        best = sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], s[1]))[:k]
        return [(score, self.passages[i]) for score, i in best]


def context_block(hits: list[tuple[float, Passage]]) -> str:
    return "\n\n".join(f"[{p.source}] {p.text}" for _, p in hits)


class RagAdapter(ModelAdapter):
    """Prepend the passages that best match the request (the last user message, or the prompt)."""

    def __init__(self, retriever: Retriever, k: int = 3):
        self.retriever, self.k = retriever, k

    def prepare_prompt(self, prompt: str) -> str:
        hits = self.retriever.search(prompt, self.k)
        return f"Context:\n{context_block(hits)}\n\n{prompt}" if hits else prompt

    def prepare_messages(self, messages: list[dict]) -> list[dict]:
        question = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
        hits = self.retriever.search(question, self.k)
        if not hits:
            return messages
        note = {"role": "system", "content": "Answer using these passages when they help:\n\n" + context_block(hits)}
        return [note, *messages]
