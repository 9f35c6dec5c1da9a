"""One module per stage of the study; each `run(context)` fills its section of the results document.

Order (backend/study/runner.py): kernel, ceiling (with roundtrip), bound, perturbation, replay,
model_mode, then the derived sections (losslessness, boundary) from what replay recorded.
"""
