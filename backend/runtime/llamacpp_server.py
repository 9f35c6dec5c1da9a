"""`python -m backend.runtime.llamacpp_server ARGS`: llama-cpp-python's `llama_cpp.server` (same
ARGS), with llama.cpp's weight repacking set as the in-process runtime sets it (`llamacpp_repack`:
off on AMX CPUs, where llama.cpp's AMX kernel can crash the server in its first forward).

The server builds its model params with `llama_cpp.llama_cpp.llama_model_default_params()` and has
no option for repacking, so that function is wrapped before the server starts (pinned
llama-cpp-python 0.3.36; tests/test_llamacpp_repack.py checks that a server-style `Llama` gets it).
"""

from __future__ import annotations

import sys

from backend.runtime.llamacpp_repack import repacking_allowed


def apply_repack_setting() -> bool:
    """Make every later `llama_model_default_params()` carry the repack setting; returns it."""
    import llama_cpp.llama_cpp as low_level

    allowed = repacking_allowed()  # ValueError for a bad $COPY_AS_DECODE_LLAMA_REPACK, before loading
    # (not __wrapped__: llama-cpp-python's ctypes binding already has one, its Python stub)
    original = getattr(low_level.llama_model_default_params, "unwrapped_default_params", low_level.llama_model_default_params)

    def default_params_with_repack_setting():
        params = original()
        params.use_extra_bufts = allowed
        return params

    setattr(default_params_with_repack_setting, "unwrapped_default_params", original)
    low_level.llama_model_default_params = default_params_with_repack_setting
    return allowed


def main() -> None:
    try:
        apply_repack_setting()
    except ValueError as error:
        sys.exit(f"error: {error}")
    from llama_cpp.server.__main__ import main as server_main

    server_main()


if __name__ == "__main__":
    main()
