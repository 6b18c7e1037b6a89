"""Provided machinery around chapter 11 (no learner task lives here): LoRA adapters served by the engine.

    engine_plugin.py  the engine plugin `lora`: its settings checked, the adapters attached to an engine
    residency.py      adapters in memory while the engine serves: slots, loads off the step, LRU eviction,
                      each step's rows, the counters
"""
