"""--rag: BM25 retrieval over a folder of text, and the adapter that puts passages in the prompt."""

import math

import pytest
from server_helpers import MODEL, start_server
from hypothesis import example, given
from hypothesis import strategies as st

from miniyaie.api.rag import Passage, RagAdapter, Retriever, tokenize

pytestmark = [pytest.mark.task(f"6.{n}") for n in range(1, 9)]  # end to end, but for own marks

DOCS = {
    "paged.md": "The paged KV cache splits memory into blocks.\n\nA block table maps positions to blocks.",
    "radix.md": "The radix tree shares prompt prefixes between requests.",
    "notes.txt": "Requests arrive. Requests wait. The scheduler admits requests when blocks are free.",
}


def bm25(query, passages, index, k1=1.5, b=0.75):
    """The formula, written out independently of the code under test."""
    docs = [tokenize(p.text) for p in passages]
    average = sum(map(len, docs)) / len(docs)
    total = 0.0
    for term in set(tokenize(query)):
        tf = docs[index].count(term)
        if tf:
            df = sum(term in d for d in docs)
            idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
            total += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(docs[index]) / average))
    return total


@pytest.fixture
def folder(tmp_path):
    for name, text in DOCS.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "ignored.bin").write_bytes(b"\x00radix radix radix")
    return tmp_path


@pytest.mark.task("6.8")
def test_scores_follow_bm25(folder):
    retriever = Retriever.from_folder(folder)
    assert len(retriever.passages) == 4 and {p.source for p in retriever.passages} == set(DOCS)
    for query in ["radix tree prefixes", "blocks", "requests blocks scheduler", "table", "nothing matches"]:
        for i in range(len(retriever.passages)):
            got, expected = retriever.score(tokenize(query), i), bm25(query, retriever.passages, i)
            assert got == pytest.approx(expected), (
                f"score of passage {i} for {query!r}: {got}, BM25 gives {expected} (idf = ln(1 + (N - df + 0.5) / "
                "(df + 0.5)), df in passages; tf in the passage; |d| in terms)")
    # |d| and its average count terms (tokenize), not whitespace-separated words: "copy-on-write" is three terms
    passages = [Passage("a", "copy-on-write blocks, shared blocks"), Passage("b", "blocks"),
                Passage("c", "the free-list of KV-cache blocks")]
    retriever = Retriever(passages)
    for i in range(len(passages)):
        got, expected = retriever.score(tokenize("blocks"), i), bm25("blocks", passages, i)
        assert got == pytest.approx(expected), (
            f"passage {passages[i].text!r} scored {got}, BM25 gives {expected}: a passage's length |d| (and the "
            "average) is its number of terms, tokenize(text), not of words between spaces")


@pytest.mark.task("6.8")
def test_a_repeated_query_term_counts_once(folder):
    retriever = Retriever.from_folder(folder)
    for i in range(len(retriever.passages)):
        once = retriever.score(["radix", "blocks"], i)
        assert retriever.score(["radix", "radix", "blocks", "radix"], i) == pytest.approx(once), (
            "a query term repeated three times scored more than once: BM25 sums over the query's distinct terms"
        )


@pytest.mark.task("6.8")
def test_a_score_reads_the_index_and_never_the_text_again(folder, monkeypatch):
    retriever = Retriever.from_folder(folder)
    expected = [retriever.score(["radix", "block"], i) for i in range(len(retriever.passages))]

    def no_tokenizing(text):
        raise AssertionError("score tokenized a passage's text: count its terms once, in the constructor, and score from that")

    monkeypatch.setattr("miniyaie.api.rag.tokenize", no_tokenizing)
    monkeypatch.setattr("miniyaie.api.rag.WORD", None)  # a score that re-splits the text with the module's pattern fails too
    scored = [retriever.score(["radix", "block"], i) for i in range(len(retriever.passages))]
    assert scored == pytest.approx(expected)


@pytest.mark.task("6.8")
def test_search_ranks_rare_and_repeated_terms_first(folder):
    retriever = Retriever.from_folder(folder)
    best = retriever.search("how does the radix tree share prefixes?", k=2)
    assert best[0][1].source == "radix.md"
    assert retriever.search("block table", k=1)[0][1].text.startswith("A block table")
    assert retriever.search("zebra quantum", k=3) == []  # nothing in common: nothing returned
    scores = [s for s, _ in retriever.search("requests blocks", k=4)]
    assert scores == sorted(scores, reverse=True) and all(s > 0 for s in scores)


@pytest.mark.task("6.8")
@given(st.integers(1, 5), st.integers(0, 20))
@example(1, 0)
def test_more_occurrences_score_higher_and_length_is_penalised(tf, padding):
    filler = " ".join(f"w{i}" for i in range(padding))
    passages = [Passage("a", ("kv " * tf) + filler), Passage("b", ("kv " * (tf + 1)) + filler), Passage("c", "other words here")]
    retriever = Retriever(passages)
    terms = tokenize("kv")
    assert retriever.score(terms, 1) > retriever.score(terms, 0) > 0
    assert retriever.score(terms, 2) == 0
    longer = Retriever([Passage("a", "kv short"), Passage("b", "kv " + "pad " * 10), Passage("c", "zzz")])
    assert longer.score(terms, 0) > longer.score(terms, 1)


def test_rag_puts_passages_in_front_of_the_prompt(folder, tiny_loaded):
    import openai

    adapter = RagAdapter(Retriever.from_folder(folder), k=1)
    assert adapter.prepare_prompt("radix tree?").startswith("Context:\n[radix.md] The radix tree")
    messages = adapter.prepare_messages([{"role": "user", "content": "radix tree?"}])
    assert messages[0]["role"] == "system" and "[radix.md]" in messages[0]["content"]
    assert adapter.prepare_messages([{"role": "user", "content": "zebra"}]) == [{"role": "user", "content": "zebra"}]
    engine, server = start_server(tiny_loaded, num_blocks=128, adapters=[adapter])
    try:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        plain = len(engine.tokenizer("radix tree?")["input_ids"])
        reply = client.completions.create(model=MODEL, prompt="radix tree?", max_tokens=1)
        assert reply.usage.prompt_tokens == len(engine.encode("radix tree?")) > plain
    finally:
        server.__exit__(None, None, None)
        engine.close()


@pytest.mark.ungraded
def test_markdown_passages_keep_their_heading_and_drop_mdbook_directives():
    from miniyaie.api.rag import split_passages

    text = "# Eviction\n\nLeaves go first.\n\n{{#include ../../x.py:evict}}\n\n- **File:** `x.py`\n\nThe end."
    assert [p.text for p in split_passages("a.md", text)] == ["Eviction: Leaves go first.", "The end."]


@pytest.mark.ungraded
def test_an_empty_folder_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no .md or .txt"):
        Retriever.from_folder(tmp_path)
    with pytest.raises(FileNotFoundError, match="not a folder"):
        Retriever.from_folder(tmp_path / "missing")
