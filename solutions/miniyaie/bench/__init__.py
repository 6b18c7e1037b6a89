"""The measuring tools, each side by side with a peer (`miniyaie bench ...`, `miniyaie harness`).

    offline.py, runners.py, workloads.py   offline throughput: our engine and transformers on the same prompts
    serve.py                               a live OpenAI-compatible server: TTFT, ITL, e2e, tok/s per concurrency
    kernel_harness.py                      chapter 4's kernels: correctness, and timings on a GPU
"""
