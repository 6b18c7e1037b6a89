"""Provided machinery around chapter 10 (no learner task lives here): the weights the engine loads.

    engine_plugin.py  the engine plugin `quantization`: a model loaded with its weights in a scheme's blocks,
                      and what the default, "auto", means for it
    gguf_model.py     a GGUF file's model in the file's own blocks, with no float32 copy of its weights
"""
