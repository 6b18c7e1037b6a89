"""Provided machinery around chapter 6's server (no learner task lives here).

    preparation.py  the worker pools that prepare requests off the event loop, cancelled when a client leaves
    server.py       running the app under uvicorn: binding, a background server for tests, shutdown
    compile_process.py  chapter 8's pattern compiles in worker processes, so a compile holds no GIL the server needs
    config_file.py  the YAML/TOML settings of `miniyaie serve --config` and InferenceEngine.from_config_file
    served_models.py  the names a request's `model` may give: the base model's, each LoRA adapter's (chapter 11)
    lora_metrics.py   chapter 11's adapter counters on /metrics
"""
