"""Whether llama.cpp may repack weights into its CPU "extra buffer types" (AMX, CPU_REPACK).

llama.cpp built for the machine it runs on (`make setup` compiles it with -march=native) moves
quantized weights into an AMX buffer on CPUs with Intel AMX (Sapphire Rapids and later), and its
AMX matrix multiply crashes with a segmentation fault in the first forward on some such machines
(ggml-org/llama.cpp#20824, closed without a fix; dspy's CI dropped its AMX runner for the same
crash). Our CI died that way on an AMX Xeon: the first in-process llama.cpp forward killed pytest,
and the app's llama.cpp server process died before answering. A crash loses the user's session, so
on a CPU that reports AMX the weights stay in plain CPU buffers (the AVX-512 kernels), through
`llama_model_params.use_extra_bufts = False`. $COPY_AS_DECODE_LLAMA_REPACK (on, off, auto) overrides.

Only the standard library here: the server launcher (`llamacpp_server`) reads it before llama.cpp loads.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPACK_ENV = "COPY_AS_DECODE_LLAMA_REPACK"
AMX_FLAGS = frozenset({"amx_tile", "amx_int8", "amx_bf16"})


def cpu_flags(cpuinfo: str | None = None) -> frozenset[str]:
    """The CPU's feature flags from /proc/cpuinfo's first "flags" line (empty where there is none)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            return frozenset()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def repacking_allowed(environ: Mapping[str, str] | None = None, cpuinfo: str | None = None) -> bool:
    """False on a CPU with AMX (see the module docstring) unless $COPY_AS_DECODE_LLAMA_REPACK=on;
    True elsewhere unless it is off. ValueError for any other value of the variable."""
    chosen = (os.environ if environ is None else environ).get(REPACK_ENV, "").strip().lower() or "auto"
    if chosen not in ("on", "off", "auto"):
        raise ValueError(f"${REPACK_ENV} must be one of on, off, auto, not {chosen!r}")
    if chosen != "auto":
        return chosen == "on"
    return not (cpu_flags(cpuinfo) & AMX_FLAGS)


def model_params(llama_cpp_module: Any, environ: Mapping[str, str] | None = None, cpuinfo: str | None = None) -> Any:
    """llama.cpp's default model params with weight repacking set by `repacking_allowed`."""
    params = llama_cpp_module.llama_model_default_params()
    params.use_extra_bufts = repacking_allowed(environ, cpuinfo)
    return params
