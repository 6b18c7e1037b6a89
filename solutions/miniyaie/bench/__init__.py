"""Benchmarks that put the engine side by side with transformers, in one process (`miniyaie bench`)."""
