"""llama.cpp's weight repacking (its AMX buffer crashes on some AMX CPUs: backend.runtime.llamacpp_repack):
the setting, the in-process runtime and the server launcher applying it, and the unrepacked path
computing what the repacked one does (the path every AMX machine now takes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from backend.runtime.llamacpp_repack import REPACK_ENV, cpu_flags, model_params, repacking_allowed

AMX_CPU = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8\n\nprocessor\t: 1\n"
AVX2_CPU = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma f16c\n"


def test_cpu_flags_reads_the_flags_line() -> None:
    assert "amx_int8" in cpu_flags(AMX_CPU) and "avx2" in cpu_flags(AVX2_CPU)
    assert cpu_flags("no flags here\n") == frozenset()
    assert cpu_flags() == cpu_flags(Path("/proc/cpuinfo").read_text())  # this machine's own


def test_repacking_is_off_on_amx_cpus_and_on_elsewhere() -> None:
    assert repacking_allowed({}, AMX_CPU) is False
    assert repacking_allowed({}, AVX2_CPU) is True
    assert repacking_allowed({REPACK_ENV: "on"}, AMX_CPU) is True
    assert repacking_allowed({REPACK_ENV: " OFF "}, AVX2_CPU) is False
    assert repacking_allowed({REPACK_ENV: "auto"}, AMX_CPU) is False


def test_a_bad_setting_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=f"{REPACK_ENV} must be one of on, off, auto, not 'yes'"):
        repacking_allowed({REPACK_ENV: "yes"}, AVX2_CPU)


def test_model_params_carry_the_setting() -> None:
    import llama_cpp

    assert model_params(llama_cpp, {}, AMX_CPU).use_extra_bufts is False
    assert model_params(llama_cpp, {}, AVX2_CPU).use_extra_bufts is True
    assert llama_cpp.llama_model_default_params().use_extra_bufts is True  # llama.cpp's own default


def test_the_server_launcher_gives_llama_cpp_server_the_setting(monkeypatch) -> None:
    """`llama_cpp.server` builds `Llama(...)`, which reads `llama_model_default_params()`."""
    import llama_cpp
    import llama_cpp.llama_cpp as low_level

    from backend.runtime.llamacpp_server import apply_repack_setting
    from backend.runtime.models import get_spec, gguf_path

    monkeypatch.setattr(low_level, "llama_model_default_params", low_level.llama_model_default_params)  # undone after
    gguf = str(gguf_path(get_spec("smollm2-135m")))
    for setting, expected in (("off", False), ("on", True)):
        monkeypatch.setenv(REPACK_ENV, setting)
        assert apply_repack_setting() is expected
        llm = llama_cpp.Llama(model_path=gguf, vocab_only=True, verbose=False)
        assert llm.model_params.use_extra_bufts is expected
        llm.close()


def test_the_launcher_runs_from_any_directory_and_refuses_a_bad_setting(tmp_path) -> None:
    from backend.cli.serve_command import server_environment

    environment = server_environment(dict(os.environ))
    command = [sys.executable, "-m", "backend.runtime.llamacpp_server"]
    shown = subprocess.run([*command, "--help"], cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and "--n_ctx" in shown.stdout, shown.stderr
    bad = subprocess.run(command, cwd=tmp_path, env={**environment, REPACK_ENV: "maybe"}, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and f"${REPACK_ENV} must be one of on, off, auto, not 'maybe'" in bad.stderr


def test_serve_print_shows_a_command_that_finds_the_launcher(capsys) -> None:
    from backend.__main__ import main

    assert main(["serve-llamacpp", "--port", "8123", "--print"]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed.startswith("PYTHONPATH=") and " -m backend.runtime.llamacpp_server --model " in printed


def test_unrepacked_weights_compute_the_same_next_tokens(monkeypatch) -> None:
    """The shipped model (merged F16 GGUF) unrepacked and as "auto" loads it: same greedy choices.
    Where repacking is allowed (no AMX) that compares the two paths; on an AMX CPU "auto" is "off"
    too (forcing "on" there could crash this process), and test_llamacpp's comparison with PyTorch,
    run under "auto", checks the unrepacked path against the float32 model."""
    from backend.runtime.llamacpp import load_llamacpp
    from backend.runtime.models import default_model_name

    text = "def mean(values):\n    total = 0\n    for value in values:\n        total += value\n    return total / len(values)\n"
    chosen = {}
    for setting in ("auto", "off"):
        monkeypatch.setenv(REPACK_ENV, setting)
        handle = load_llamacpp(default_model_name(), n_ctx=512, threads=1)
        try:
            ids = list(handle.tokenizer(text, add_special_tokens=False)["input_ids"])
            rows = handle.new_cache().append_span_all(ids)
            chosen[setting] = rows.argmax(dim=-1).tolist()
        finally:
            handle.close()
    agree = sum(a == b for a, b in zip(chosen["auto"], chosen["off"]))
    assert agree >= len(chosen["auto"]) - 1, (chosen["auto"], chosen["off"])  # one near-tie may flip


def test_a_bad_setting_is_named_as_such_by_the_in_process_runtime(monkeypatch, tmp_path) -> None:
    """Checked before llama.cpp opens a file, so the error names the variable, not "cannot load"."""
    from backend.runtime.llamacpp import load_llamacpp
    from backend.runtime.models import default_model_name

    monkeypatch.setenv(REPACK_ENV, "sometimes")
    with pytest.raises(ValueError, match="must be one of on, off, auto, not 'sometimes'") as raised:
        load_llamacpp(default_model_name(), gguf=tmp_path / "never-read.gguf", n_ctx=256, threads=1)
    assert "cannot load" not in str(raised.value)
