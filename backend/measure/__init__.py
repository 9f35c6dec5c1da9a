"""The measurement library: every number the command line and the study report is computed here once.

`ceiling` (copy ceiling, token accounting, closed-form bound), `perturb` (exact match under span
noise), `replay` (reference replay of a case through an engine, one definition of exact, pooled
summaries as ratios of summed times), `kernel_bench` (one N-token forward vs N decode steps),
`machine` (what ran it). `backend.cli` and `backend.study` parse, call these and print.
"""
