"""What the stages share: the config, the results document being filled, the corpora, the kernel
tables, and the tokenizers and model, each loaded once on first use."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from backend.data.cases import EditCase
from backend.data.corpora import load_corpus
from backend.study.config import MEASURED, RESULTS_KIND, Log, StudyConfig, StudyError, stderr_log, vocabulary_of


class StudyContext:
    """The state one study run builds up; each stage module reads and extends it."""

    def __init__(self, config: StudyConfig, *, log: Log = stderr_log) -> None:
        self.config = config
        self.log = log
        self.results: dict[str, Any] = {"kind": RESULTS_KIND, "version": 1}
        self.corpora: dict[str, list[EditCase]] = {}
        self.kernel_tables: list[dict[str, Any]] = []
        self.ceilings: dict[str, dict[str, list[Any]]] = {}  # tokenizer -> corpus -> [CaseCeiling]
        self._tokenizers: dict[str, Any] = {}
        self._loaded: Any = None

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time a stage into results["stages"][name]["seconds"], logging its start and end."""
        self.log(f"[study] {name} ...")
        started = time.perf_counter()
        try:
            yield
        finally:
            seconds = time.perf_counter() - started
            self.results.setdefault("stages", {})[name] = {"seconds": seconds}
            self.log(f"[study] {name} done in {seconds:.1f} s")

    def tokenizer(self, name: str) -> Any:
        if name not in self._tokenizers:
            from backend.tokenizers import load_tokenizer

            self._tokenizers[name] = load_tokenizer(name)
        return self._tokenizers[name]

    def loaded(self) -> Any:
        """The study's model (a LoadedModel), loaded on first use; its description goes into results."""
        if self._loaded is None:
            from backend.runtime.models import load_model

            self.log(f"[study] loading {self.config.model} ...")
            self._loaded = load_model(self.config.model)
            self.results.setdefault("model", {}).update(describe_loaded(self._loaded))
        return self._loaded

    @property
    def model_vocabulary(self) -> str:
        return vocabulary_of(self.config.model)

    def tokenizer_names(self) -> list[str]:
        names = list(self.config.tokenizers)
        if self.model_vocabulary not in names:
            names.append(self.model_vocabulary)
        return names

    def load_corpora(self) -> None:
        info = {}
        for name in self.config.corpora:
            cases = load_corpus(name, self.config.data_dir)
            self.corpora[name] = cases
            info[name] = {"cases": len(cases)}
        self.results["corpora"] = info

    def ceiling_cases(self, name: str) -> list[EditCase]:
        """The cases of one corpus that ceiling, round trip, bound and perturbation use."""
        cases = self.corpora[name]
        limit = self.config.ceiling_limit
        return cases if limit is None else cases[:limit]

    def model_kernel(self) -> Any:
        """The KernelTable measured for the study's model in this run."""
        from backend.data.kernel import KernelTable

        for table in self.kernel_tables:
            if table.get("model") == self.config.model and table.get("origin") == MEASURED:
                return KernelTable.from_dict(table, origin=f"kernel table of {self.config.model}")
        raise StudyError(f"no kernel table measured for {self.config.model}")


def describe_loaded(loaded: Any) -> dict[str, Any]:
    """Label, weights, device, dtype and parameter count of a LoadedModel, as JSON values."""
    spec = loaded.spec
    try:
        params = sum(p.numel() for p in loaded.model.parameters())
    except Exception:  # a model without parameters() (e.g. a remote handle): unknown
        params = None
    return {"label": getattr(spec, "label", None), "weights": getattr(spec, "weights_label", None),
            "device": str(loaded.device), "dtype": str(loaded.dtype).replace("torch.", ""), "parameters": params}
