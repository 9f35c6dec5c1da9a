"""Which models exist: `models.yaml` parsed once (with pyyaml) into frozen `ModelSpec` records.

Sources (see models.yaml): a GGUF file inside a pip package (the embedded SmolLM2-135M), a hub id
(local HF cache only), a local directory, a "shape" (a real config with random weights, for kernel
timing only), or an "adapter" (a LoRA directory in the repository merged into its base entry's
weights at load). Listing specs imports neither torch nor transformers.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import yaml

from backend.runtime.prompt import PROMPT_STYLES

MODELS_YAML = Path(__file__).resolve().parents[2] / "models.yaml"
SOURCE_KINDS = ("gguf-package", "hub", "local", "shape", "adapter")
REPO_ROOT = MODELS_YAML.parent
REAL_WEIGHTS = "real"
RANDOM_WEIGHTS = "random (timing only)"


class ModelUnavailable(RuntimeError):
    """The model cannot be loaded here; the message says what to install or download."""


class UnknownModel(ModelUnavailable):
    """No entry of that name in models.yaml (the message lists the known names)."""


@dataclass(frozen=True)
class ModelSource:
    kind: str                       # one of SOURCE_KINDS
    package: str | None = None      # gguf-package: importable package name holding the file
    file: str | None = None         # gguf-package: the GGUF file name inside the package
    install: str | None = None      # gguf-package: the command that provides the package
    id: str | None = None           # hub: "owner/name"
    path: str | None = None         # local: a save_pretrained directory
    config: Mapping[str, Any] | None = field(default=None, hash=False)  # shape: HF config dict
    base: str | None = None         # adapter: the entry whose weights the LoRA adapter is merged into


@dataclass(frozen=True)
class ModelSpec:
    name: str
    label: str
    source: ModelSource
    vocabulary: str | None          # "smollm2" | "qwen2.5": backend.tokenizers / mask-cost name
    chat_template: str              # "chatml"
    context_length: int
    dtype: Mapping[str, str] = field(hash=False)  # device type -> torch dtype name
    tokenizer: str | None = None    # entry whose HF tokenizer to borrow (shape models); None: own / none
    is_default: bool = False
    prompt: str = "few-shot"        # copy-as-decode prompt style (runtime.prompt.PROMPT_STYLES); trained models: zero-shot, instruction-first

    @property
    def adapter_dir(self) -> Path | None:
        """adapter entries: the LoRA adapter directory (relative paths are from the repository root)."""
        if self.source.kind != "adapter" or self.source.path is None:
            return None
        path = Path(self.source.path).expanduser()
        return path if path.is_absolute() else REPO_ROOT / path

    @property
    def random_weights(self) -> bool:
        return self.source.kind == "shape"

    @property
    def weights_label(self) -> str:
        return RANDOM_WEIGHTS if self.random_weights else REAL_WEIGHTS

    def dtype_name(self, device_type: str) -> str:
        return self.dtype.get(device_type, "float32")


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """A frozen value (MappingProxyType, tuple) as plain dicts and lists again."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


def _spec_from_entry(entry: dict[str, Any], default_name: str | None) -> ModelSpec:
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"models.yaml: an entry has no name: {entry!r}")
    src = dict(entry.get("source") or {})
    kind = src.pop("kind", None)
    if kind not in SOURCE_KINDS:
        raise ValueError(f"models.yaml: {name}: source.kind must be one of {SOURCE_KINDS}, not {kind!r}")
    required = {"gguf-package": ("package", "file"), "hub": ("id",), "local": ("path",), "shape": ("config",),
                "adapter": ("base", "path")}[kind]
    for key in required:
        if not src.get(key):
            raise ValueError(f"models.yaml: {name}: source kind {kind} needs source.{key}")
    unknown = set(src) - {"package", "file", "install", "id", "path", "config", "base"}
    if unknown:
        raise ValueError(f"models.yaml: {name}: unknown source keys {sorted(unknown)}")
    source = ModelSource(kind=kind, **{k: _freeze(v) for k, v in src.items()})
    prompt = str(entry.get("prompt") or "few-shot")
    if prompt not in PROMPT_STYLES:
        raise ValueError(f"models.yaml: {name}: prompt must be one of {PROMPT_STYLES}, not {prompt!r}")
    return ModelSpec(
        name=name,
        label=str(entry.get("label") or name),
        source=source,
        vocabulary=entry.get("vocabulary"),
        chat_template=str(entry.get("chat_template") or "chatml"),
        context_length=int(entry.get("context_length") or 2048),
        dtype=_freeze(dict(entry.get("dtype") or {"cuda": "bfloat16", "cpu": "float32"})),
        tokenizer=entry.get("tokenizer"),
        is_default=(name == default_name),
        prompt=prompt,
    )


def parse_models_yaml(text: str) -> dict[str, ModelSpec]:
    """Specs by name, in file order. Raises ValueError on a malformed file or duplicate names."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ValueError(f"models.yaml: not valid YAML: {error}") from None
    if not isinstance(data, dict) or not isinstance(data.get("models"), list):
        raise ValueError("models.yaml: expected a mapping with a 'models' list")
    default_name = data.get("default")
    specs: dict[str, ModelSpec] = {}
    for entry in data["models"]:
        spec = _spec_from_entry(entry, default_name)
        if spec.name in specs:
            raise ValueError(f"models.yaml: duplicate model name {spec.name!r}")
        specs[spec.name] = spec
    if default_name is not None and default_name not in specs:
        raise ValueError(f"models.yaml: default {default_name!r} is not an entry")
    for spec in specs.values():
        if spec.tokenizer is not None and spec.tokenizer not in specs:
            raise ValueError(f"models.yaml: {spec.name}: tokenizer {spec.tokenizer!r} is not an entry")
    return specs


@functools.lru_cache(maxsize=None)
def _specs_from_file(path: str) -> dict[str, ModelSpec]:
    return parse_models_yaml(Path(path).read_text(encoding="utf-8"))


def model_specs(path: str | os.PathLike[str] | None = None) -> dict[str, ModelSpec]:
    """All entries of models.yaml (parsed once per path), by name in file order."""
    return dict(_specs_from_file(str(path or MODELS_YAML)))


def default_model_name() -> str:
    for spec in model_specs().values():
        if spec.is_default:
            return spec.name
    return next(iter(model_specs()))


def get_spec(name: str) -> ModelSpec:
    """The entry called `name`; UnknownModel (listing the known names) if none."""
    specs = model_specs()
    if name not in specs:
        raise UnknownModel(f"unknown model {name!r}; known: {', '.join(specs)}")
    return specs[name]


def spec_for(name_or_spec: str | ModelSpec) -> ModelSpec:
    """A spec, an entry name, or an ad-hoc save_pretrained directory as a spec (UnknownModel otherwise)."""
    if isinstance(name_or_spec, ModelSpec):
        return name_or_spec
    if name_or_spec in model_specs():
        return get_spec(name_or_spec)
    folder = Path(name_or_spec).expanduser()
    if (folder / "adapter_config.json").is_file():  # an adapter `train` wrote, not yet in models.yaml
        return trained_adapter_spec(folder)
    if (folder / "config.json").is_file():  # an ad-hoc local directory
        return ModelSpec(
            name=folder.name, label=str(folder), source=ModelSource(kind="local", path=str(folder)),
            vocabulary=None, chat_template="chatml", context_length=32768,
            dtype=MappingProxyType({"cuda": "bfloat16", "cpu": "float32"}),
        )
    return get_spec(name_or_spec)  # raises UnknownModel


def trained_adapter_spec(folder: Path) -> ModelSpec:
    """An adapter directory written by `python -m backend train` as a spec: its base entry (named in
    the directory's training.json) with that adapter merged in and the prompt style it was
    trained on (the card's config.prompt; zero-shot for cards written before the option); so
    `--model var/train-run5` evaluates a run before it is registered in models.yaml.
    UnknownModel when the directory does not say its base."""
    card = folder / "training.json"
    try:
        config = json.loads(card.read_text(encoding="utf-8"))["config"]
        base_name, prompt = config["base_model"], str(config.get("prompt") or "zero-shot")
    except (OSError, ValueError, KeyError, TypeError):
        raise UnknownModel(f"{folder}: an adapter directory needs the training.json that `train` writes "
                           "(it names the base model); or register the adapter in models.yaml") from None
    base = get_spec(str(base_name))
    if base.source.kind == "adapter":  # trained from a registered adapter entry's own base
        base = get_spec(str(base.source.base))
    path = folder.resolve()
    return dataclasses.replace(base, name=str(folder), label=f"{base.label} + adapter {path}",
                               source=ModelSource(kind="adapter", base=base.name, path=str(path)),
                               is_default=False, prompt=prompt)
