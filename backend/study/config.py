"""What decides what the study runs: `StudyConfig` (two presets), the stage names and the error type.

Its own module so the stages, the runner and the report all import it without importing each other.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from backend.data.corpora import CORPUS_NAMES
from backend.measure.perturb import DEFAULT_RATES

STAGES = ("kernel", "ceiling", "roundtrip", "bound", "perturbation", "replay", "runtimes", "model_mode")
LONG_CORPORA = ("commits", "stdlib-probe")
RESULTS_KIND = "study-results"
FULL_KERNEL_N = (8, 16, 32, 64, 128, 256, 512)
DEFAULT_KERNEL_MODELS = ("smollm2-135m", "qwen2.5-0.5b-shape")
MEASURED = "measured in this run"  # origin of a kernel table timed by this run (others: "merged from F")

Log = Callable[[str], None]


@dataclass(frozen=True)
class StudyConfig:
    """Everything that decides what the study runs. `quick_preset()` / `full()` give the two presets."""

    model: str = "smollm2-135m"
    data_dir: str | None = None
    out: str = "study-out"
    quick: bool = False
    corpora: tuple[str, ...] = CORPUS_NAMES
    kernel_models: tuple[str, ...] = DEFAULT_KERNEL_MODELS
    kernel_n: tuple[int, ...] = FULL_KERNEL_N
    kernel_repeats: int = 3
    kernel_context: int = 512
    kernel_only: bool = False
    extra_kernels: tuple[str, ...] = ()
    tokenizers: tuple[str, ...] = ("qwen2.5",)  # the model's own vocabulary is added at run time
    ceiling_limit: int | None = None  # cases per corpus for ceiling/roundtrip/bound/perturbation; None = all
    limit: int = 10                   # replay cases per short corpus (HumanEvalPack)
    long_limit: int = 2               # replay cases per long corpus (commits, stdlib-probe)
    tune_cases: int = 10              # dev cases per corpus on which prompt lookup's setting is chosen
    replay_max_tokens: int = 3000
    replay_order: str = "seeded"      # "seeded" (shuffled by seed) or "shortest" (smallest first: --quick)
    model_cases: int = 6              # model-mode sample (HumanEvalPack Python and JS, alternating)
    model_max_new_tokens: int = 384
    replay_runtimes: tuple[str, ...] = ("llama.cpp",)  # replayed again on these, beside torch (stage runtimes)
    rates: tuple[float, ...] = DEFAULT_RATES
    seed: int = 0
    png: bool = True
    command: str = ""

    @classmethod
    def full(cls, **overrides: Any) -> "StudyConfig":
        return cls(**overrides)

    @classmethod
    def quick_preset(cls, **overrides: Any) -> "StudyConfig":
        """A few minutes on 2 cores: 2 kernel sizes of the model only, 6 ceiling cases, 2 replays per corpus."""
        base = dict(quick=True, kernel_models=(), kernel_n=(8, 32), kernel_repeats=1, kernel_context=64,
                    ceiling_limit=6, limit=2, long_limit=1, tune_cases=3, replay_max_tokens=400, replay_order="shortest", model_cases=2,
                    model_max_new_tokens=48, rates=(0.0, 0.1, 0.5, 1.0))
        base.update(overrides)
        return cls(**base)

    @classmethod
    def from_results(cls, config: dict[str, Any]) -> "StudyConfig":
        """The config recorded in a results.json (lists back to tuples; unknown keys ignored)."""
        fields = set(cls.__dataclass_fields__)
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in config.items() if k in fields})


class StudyError(RuntimeError):
    """The study cannot run (missing data, model, or a bad option); the message says what to do."""


def stderr_log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def vocabulary_of(model_name: str) -> str:
    """The tokenizer family of a model: models.yaml's `vocabulary`, else a guess from the name."""
    try:
        from backend.runtime.models import get_spec

        vocabulary = get_spec(model_name).vocabulary
        if vocabulary:
            return vocabulary
    except Exception:  # an unknown name (e.g. an external kernel table): fall back to the name
        pass
    return "qwen2.5" if "qwen" in model_name.lower() else "smollm2"
