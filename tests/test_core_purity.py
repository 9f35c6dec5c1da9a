"""backend.core imports only the standard library: every module, including ones added later."""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORE_MODULES = sorted(
    f"backend.core.{path.stem}"
    for path in (REPO / "backend" / "core").glob("*.py")
    if path.stem != "__init__"
)
HEAVY_PACKAGES = ["torch", "transformers", "gradio", "sqlalchemy", "numpy", "plotly"]

# A fresh interpreter: this test process may already have imported heavy packages.
PROBE = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted(sys.modules)))
"""


def test_the_core_has_modules_to_check():
    mine = {"backend.core.lines", "backend.core.program", "backend.core.resolve", "backend.core.oracle"}
    assert mine <= set(CORE_MODULES)


def test_core_imports_no_heavy_package():
    result = subprocess.run(
        [sys.executable, "-c", PROBE, "backend.core", *CORE_MODULES],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(CORE_MODULES) <= set(loaded)
    heavy = sorted(name for name in loaded if name.split(".")[0] in HEAVY_PACKAGES)
    assert heavy == []
