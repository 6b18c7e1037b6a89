"""Small byte-level vocabularies for chapter 8's tests (a module of its own: every chapter folder has a
`conftest`, so `from conftest import ...` picks whichever folder pytest imported first)."""


def byte_vocabulary(extra: list[bytes] = (), eos: int | None = None, size: int | None = None):
    """Tokens 0..255 are the single bytes, then `extra`; end-of-sequence is the next id; None-padded to `size`."""
    from miniyaie.structured import Vocabulary

    tokens = [bytes([b]) for b in range(256)] + list(extra)
    eos = len(tokens) if eos is None else eos
    tokens.append(None)
    tokens += [None] * ((size or 0) - len(tokens))
    return Vocabulary(tokens, (eos,))
