"""Chapter 2's tests of calls the contract says must be refused: fail with the contract, not "DID NOT RAISE"."""

import pytest


def refused(error: type[BaseException], call, contract: str) -> BaseException:
    """Run call(), which the contract says must raise `error`; return the error, or fail saying what was broken."""
    try:
        result = call()
    except error as raised:
        return raised
    pytest.fail(f"{contract}; it returned {result!r} instead", pytrace=False)
