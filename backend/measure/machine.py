"""What ran a measurement: CPU model, cores, RAM, accelerator, library versions. Read-only probes.

One `machine_info` for every measurement: the study's results.json and each kernel table carry it.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import sys
from importlib import metadata
from typing import Any


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_gib() -> float | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 1024**2, 1)
    except (OSError, ValueError):
        pass
    return None


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def machine_info(device: Any = None) -> dict[str, Any]:
    """The machine and versions, as plain JSON values. `device` (a torch.device) names the device the
    measurement ran on in `device_name` (the GPU's name on CUDA, else the CPU model). Imports torch
    when it is installed (every measurement needs it anyway)."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cpu = _cpu_model()
    info: dict[str, Any] = {
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "usable_cpus": usable,
        "ram_gib": _ram_gib(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "versions": {p: _version(p) for p in ("torch", "transformers", "tokenizers", "plotly", "kaleido")},
        "threads": None,
        "accelerator": None,
        "device_name": cpu,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    try:
        import torch
    except ImportError:
        return info
    info["threads"] = torch.get_num_threads()
    if torch.cuda.is_available():
        info["accelerator"] = torch.cuda.get_device_name(0)
    if device is not None and getattr(device, "type", None) == "cuda":
        info["device_name"] = torch.cuda.get_device_name(device)
    return info


def hardware_label(info: dict[str, Any]) -> str:
    """One line naming the hardware, for the report's table header."""
    cpu = f"{info.get('cpu', '?')}, {info.get('usable_cpus', '?')} usable cores, {info.get('ram_gib', '?')} GiB RAM"
    return f"{info['accelerator']} ({cpu})" if info.get("accelerator") else f"CPU only: {cpu}"
