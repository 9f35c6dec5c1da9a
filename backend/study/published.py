"""The published figures of the copy-as-decode study, quoted for comparison (never measured here).

Source: the project's mission statement (the study's abstract as given to this project):
Qwen2.5-1.5B/7B, A100, bf16. Each entry holds the quoted text and the numbers it states.
"""

from __future__ import annotations

SOURCE = "the study's abstract as quoted in this project's mission statement"
HARDWARE = "NVIDIA A100, bf16, Qwen2.5-1.5B and Qwen2.5-7B"

PUBLISHED = {
    "kernel_speedup": {
        "text": "copying N tokens by one prefill is 6.8x-303x faster than autoregression for N in 8..512",
        "low": 6.8, "high": 303.0, "n_range": [8, 512],
    },
    "line_coverage": {
        "text": "74-98% of gold tokens reachable by line copies on edit corpora (HumanEvalPack-Fix Py/JS and a probe set)",
        "low": 0.74, "high": 0.98,
    },
    "bound": {
        "text": "closed-form wall-clock bounds of 3.4x-29x (13x pooled)",
        "low": 3.4, "high": 29.0, "pooled": 13.0,
    },
    "token_coverage": {
        "text": "token-level copy reaches 91-99% coverage",
        "low": 0.91, "high": 0.99,
    },
    "roundtrip": {
        "text": "oracle programs round-trip losslessly on all 482 cases",
        "cases": 482,
    },
    "perturbation": {
        "text": "off-by-one span noise drops exact match from 100% to 15.5%",
        "clean": 1.0, "noisy": 0.155,
    },
    "finetune": {
        "text": "fine-tuning a 1.5B coder lifts fix exact match from 0% to 12-17%",
        "before": 0.0, "low": 0.12, "high": 0.17,
    },
}
