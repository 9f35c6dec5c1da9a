"""copy-as-decode: the model emits a program of line copies and generated text.

Layers, imports pointing one way only:
    backend.core     pure algorithm, standard library only
    backend.runtime  torch/transformers: KV cache, constrained decoder, baselines
    backend.storage  SQLAlchemy: sessions, edits, annotations
    backend.cli      the `python -m backend` command line
    app              the Gradio UI (imports backend, never the other way)
"""
