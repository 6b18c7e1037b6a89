"""Lab scripts: one-off measurements and checks behind the book's figures, not tests and not `miniyaie bench`.

Each runs from the repository root as `python -m miniyaie.bench.lab.<name> [args]`; README.md here lists
them, one line each, and each module's docstring gives its commands and what it prints. Nothing here
asserts a timing. Provided code: the course generator does not copy it into chapters/.
"""
