"""`miniyaie serve`: the engine behind an OpenAI-compatible HTTP API (chapter 6).

With no arguments it serves the bundled SmolLM2-135M-Instruct on
127.0.0.1:8000. Chapter code is imported after `--impl` is applied, so
`miniyaie serve --impl chapters` serves the learner's own tree.
"""

from __future__ import annotations

import argparse
import os
import sys

from miniyaie.cli.args import UsageError, add_lora_args, add_scheduling_args, positive_int
from miniyaie.cli.engine_from_flags import build_engine

DEFAULT_MAX_TOKENS = 512  # when a request gives no max_tokens (cut to the context left)


def add_parsers(sub) -> None:
    p = sub.add_parser("serve", help="serve the model over an OpenAI-compatible HTTP API (chapter 6)")
    p.add_argument("--model", default=None, help="a local Hugging Face directory or hub id (default: bundled SmolLM2-135M-Instruct)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=positive_int, default=8000, help="port (default 8000)")
    p.add_argument("--api-key", default=os.environ.get("MINIYAIE_API_KEY"),
                   help="require 'Authorization: Bearer KEY' (default: $MINIYAIE_API_KEY, else no key)")
    p.add_argument("--served-model-name", action="append", default=None, help="the model name clients use (repeatable)")
    p.add_argument("--rag", default=None, metavar="DIR", help="prepend the best-matching passages of DIR's .md/.txt files")
    p.add_argument("--rag-passages", type=positive_int, default=3, help="passages per request with --rag (default 3)")
    p.add_argument("--max-body-bytes", type=positive_int, default=1 << 20, help="largest request body (default 1 MiB)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    add_scheduling_args(p)
    add_lora_args(p)
    p.add_argument("--config", default=None, help="engine settings: a YAML or TOML file (engine:, sampling:, resource:)")
    p.add_argument("--impl", default=None, help="serve your chapters, e.g. 'chapters' (see the book)")
    p.add_argument("--tensor-parallel-size", type=positive_int, default=None, metavar="N",
                   help="split the model over N processes on this machine (chapter 7; default: the config's, else 1)")
    p.add_argument("--structured-limit", action="append", default=None, metavar="NAME=VALUE",
                   help="a cap on structured output requests, e.g. max_items=1000 (repeatable; the book, chapter 8, "
                        "lists them and their defaults)")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    p.set_defaults(handler=cmd_serve, runs_engine=True)  # relaunched on the fast CPU runtime (cli/main.py)


def cmd_serve(args: argparse.Namespace) -> int:
    engine = build_engine(args, default_max_tokens=DEFAULT_MAX_TOKENS)  # applies --impl before chapter code is imported
    from miniyaie.api import RagAdapter, Retriever, ServerSettings, create_app
    from miniyaie.serving.server import serve
    from miniyaie.engine import EngineError
    from miniyaie.serving.config_file import load_settings

    if args.rag:
        try:
            retriever = Retriever.from_folder(args.rag)
        except FileNotFoundError as exc:
            engine.close()
            raise UsageError(str(exc)) from None
        engine.adapters.append(RagAdapter(retriever, k=args.rag_passages))
        print(f"RAG: {len(retriever.passages)} passages from {args.rag}", file=sys.stderr)
    names = tuple(args.served_model_name or (engine.model_name,))
    chosen = load_settings(args.config).sampling_keys if args.config else ()  # the operator's, over the model's defaults
    settings = ServerSettings(api_key=args.api_key, served_model_names=names, max_body_bytes=args.max_body_bytes,
                              sampling_defaults={k: getattr(engine.sampling_defaults, k) for k in chosen})
    try:
        app = create_app(engine, settings)
    except EngineError as exc:  # e.g. a generation_config.json with an out-of-range temperature
        engine.close()
        raise UsageError(str(exc)) from None
    if args.host not in ("127.0.0.1", "localhost", "::1") and not args.api_key:
        print(f"warning: serving on {args.host} without --api-key: anyone who can reach it can use it", file=sys.stderr)
    print(f"Serving {names[0]} on http://{args.host}:{args.port} (OpenAI API at /v1; /health, /stats, /metrics)"
          f"{'; API key required' if args.api_key else ''}. Ctrl-C stops.", file=sys.stderr, flush=True)
    try:
        serve(app, args.host, args.port, log_level=args.log_level)
    finally:
        engine.close()
    return 0
