"""Where a model's weights live, whether they are here, and the one GGUF conversion cache.

A gguf-package entry's GGUF file is de-quantised once into
`user_cache_dir()/models/<name>-<file stem>-<bytes>-v<N>/` (a save_pretrained directory: weights,
config and tokenizer files; GGUF load ~22-31 s on 2 cores, a load from the cache ~3 s). The text
tokenizer (backend/tokenizers.py) reads its `tokenizer.json` from the same directory: one
conversion, one cache rule. The conversion writes a temporary directory and renames it into place,
so a killed conversion never leaves a half-written cache.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from backend.runtime.model_specs import ModelSpec, ModelUnavailable, get_spec, model_specs

CONVERSION_VERSION = 1  # bump when the converted-cache layout changes


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


def source_field(spec: ModelSpec, name: str) -> str:
    """A `source.<name>` the entry's kind requires (parse_models_yaml checked it; an ad-hoc spec may lack it)."""
    value = getattr(spec.source, name)
    if not isinstance(value, str) or not value:
        raise ModelUnavailable(f"model {spec.name}: models.yaml gives no source.{name}")
    return value


def gguf_path(spec: ModelSpec) -> Path:
    """The GGUF file inside its package (found without importing the package: its __init__ fails)."""
    source = spec.source
    package, file = source_field(spec, "package"), source_field(spec, "file")
    found = importlib.util.find_spec(package)
    hint = source.install or f"pip install {package}"
    if found is None or not found.submodule_search_locations:
        raise ModelUnavailable(f"model {spec.name} needs the package {package}: {hint}")
    for folder in found.submodule_search_locations:
        candidate = Path(folder) / file
        if candidate.is_file():
            return candidate
    raise ModelUnavailable(f"model {spec.name}: {source.file} is missing from package {source.package}; reinstall: {hint}")


def converted_dir(spec: ModelSpec, root: Path | None = None) -> Path:
    """Where the de-quantised copy of a gguf-package model lives (it may not exist yet), under
    `root` (default `user_cache_dir()`); keyed by the GGUF's size, so a new wheel re-converts."""
    gguf = gguf_path(spec)
    key = f"{spec.name}-{gguf.stem}-{gguf.stat().st_size}-v{CONVERSION_VERSION}"
    return (user_cache_dir() if root is None else root) / "models" / key


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
            return (Path(source_field(spec, "path")).expanduser() / "config.json").is_file()
        if kind == "adapter":
            adapter = spec.adapter_dir
            return adapter is not None and (adapter / "adapter_config.json").is_file() and weights_present(get_spec(source_field(spec, "base")))
        # shape: weights are random; a borrowed tokenizer must be present
        return spec.tokenizer is None or weights_present(get_spec(spec.tokenizer))
    except ModelUnavailable:
        return False


def usable_models(*, include_random: bool = False) -> list[ModelSpec]:
    """Entries whose weights are present here (the UI's picker); shapes/random only if asked."""
    return [s for s in model_specs().values() if (include_random or not s.random_weights) and weights_present(s)]


def require_transformers() -> None:
    if importlib.util.find_spec("transformers") is None:
        raise ModelUnavailable("loading a model needs transformers: pip install -r requirements.txt")


def weights_dir(spec: ModelSpec) -> Path:
    """A save_pretrained-style directory holding this entry's weights and tokenizer (an adapter
    entry: its base's). Raises ModelUnavailable saying what is missing."""
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
        return weights_dir(get_spec(source_field(spec, "base")))
    if kind == "local":
        folder = Path(source_field(spec, "path")).expanduser()
        if not (folder / "config.json").is_file():
            raise ModelUnavailable(f"model {spec.name}: no config.json in {folder}; put the model's files there")
        return folder
    raise ModelUnavailable(f"model {spec.name} has random weights and no directory")


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


def ensure_converted(spec: ModelSpec, root: Path | None = None) -> Path:
    """The de-quantised cache of a gguf-package entry, converting it first if needed (~22-31 s once).

    Atomic: the conversion is written to a temporary sibling directory and renamed into place;
    when two processes convert at once, the first rename wins and the other copy is discarded.
    """
    target = converted_dir(spec, root)
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
        json.dumps({"gguf": str(gguf), "bytes": gguf.stat().st_size, "version": CONVERSION_VERSION}) + "\n"
    )
