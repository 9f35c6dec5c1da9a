"""`serve-llamacpp [--model M] [--host H] [--port P] [--n-ctx N] [--print]`: llama.cpp's OpenAI-compatible
server (llama-cpp-python's `llama_cpp.server`, started through `backend.runtime.llamacpp_server` for
the runtime's weight-repacking setting) on a models.yaml entry, the trained adapter included.

An adapter entry is served as its base GGUF with the adapter merged in, converted once (the same
file the in-process llama.cpp runtime loads), so `--engine-url http://H:P --engine-kind
llamacpp --model M` decodes with the same weights remotely. `--print` prints the command instead
of running it (to run it under a process manager). The process replaces this one (exec).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from backend.cli.common import UsageError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("serve-llamacpp", help="llama.cpp's server on a models.yaml entry (adapters too)")
    parser.add_argument("--model", default=None, help="a models.yaml entry with a GGUF file (default: the default model)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--n-ctx", type=int, default=None, help="context tokens (default: the entry's context_length)")
    parser.add_argument("--print", action="store_true", help="print the command line instead of running it")
    parser.set_defaults(handler=cmd_serve_llamacpp)


def server_command(model: str | None, host: str, port: int, n_ctx: int | None) -> list[str]:
    """The `python -m backend.runtime.llamacpp_server ...` argv for the entry (llama_cpp.server with
    the runtime's weight-repacking setting; UsageError if the entry has no GGUF)."""
    from backend.runtime.llamacpp import gguf_files
    from backend.runtime.models import ModelUnavailable, UnknownModel, default_model_name, spec_for

    try:
        spec = spec_for(model or default_model_name())
        base, lora = gguf_files(spec)
    except (ModelUnavailable, UnknownModel) as error:
        raise UsageError(str(error)) from None
    command = [sys.executable, "-m", "backend.runtime.llamacpp_server", "--model", str(base), "--host", host, "--port", str(port),
               "--n_ctx", str(n_ctx or spec.context_length), "--model_alias", spec.name]
    return command + (["--lora_path", str(lora)] if lora is not None else [])


# The launcher is this project's module: the exec'd process finds it from any working directory.
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def server_environment(environ: dict[str, str]) -> dict[str, str]:
    """environ with the project root first on PYTHONPATH (for `-m backend.runtime.llamacpp_server`)."""
    paths = [str(PROJECT_ROOT)] + [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(PROJECT_ROOT)]
    return {**environ, "PYTHONPATH": os.pathsep.join(paths)}


def cmd_serve_llamacpp(args: argparse.Namespace) -> int:
    if not 0 < args.port < 65536:
        raise UsageError(f"--port {args.port}: not a port number")
    command = server_command(args.model, args.host, args.port, args.n_ctx)
    environment = server_environment(dict(os.environ))
    shown = shlex.join([f"PYTHONPATH={environment['PYTHONPATH']}", *command])
    if args.print:
        print(shown)
        return 0
    print(f"serving on http://{args.host}:{args.port}: {shown}", file=sys.stderr, flush=True)
    os.execve(command[0], command, environment)
    return 0  # not reached
