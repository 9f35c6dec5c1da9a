"""Teaching the embedded model to write copy-as-decode programs.

- `sources`: real code files this machine may use legally (the Python standard library's packages,
  permissively licensed Python packages, pinned permissively licensed npm packages), cut into windows.
- `edits`: verifiable edit tasks on a window (rename, literal, delete, insert, replace, several edits,
  update snippet, injected bug), each with a natural instruction. Standard library only. The generators:
  `line_ops` (the line-operation representation), `line_edits`, `bug_edits`, `combined_edits`.
- `dataset`: `make-data`: windows -> edit cases -> oracle programs, split by source file, checked by
  hash against every evaluation case, written as JSONL with a manifest.
- `examples`: a case -> token ids and labels in the decoder's context layout (loss on program tokens).
- `trainer`: LoRA training with checkpoints and resume; writes the adapter and a training card.
- `evaluate`: model-mode evaluation: finished programs, exact match, failure taxonomy, speed.
"""
