"""Provided machinery around chapter 6's server (no learner task lives here).

    preparation.py  the worker pools that prepare requests off the event loop, cancelled when a client leaves
    server.py       running the app under uvicorn: binding, a background server for tests, shutdown
    config_file.py  the YAML/TOML settings of `miniyaie serve --config` and InferenceEngine.from_config_file
"""
