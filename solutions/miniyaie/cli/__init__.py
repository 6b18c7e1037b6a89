"""The `miniyaie` command: one parser (main.py), one module per command group.

    main.py              the parser and the dispatch: the one entry point
    args.py              argument types and the sampling flags shared by commands
    engine_from_flags.py an InferenceEngine from --model/--config/--device/--impl
    generate.py          generate, chat
    serve.py             serve
    bench.py             bench serve, bench offline (the tools live in miniyaie.bench)
    course.py            grade, course sync/check/notebooks/holes/mutants
    harness.py           harness (chapter 4's kernels; the tool lives in miniyaie.bench)
    hint.py              hint (a task's hint ladder, one level at a time)
"""

from miniyaie.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
