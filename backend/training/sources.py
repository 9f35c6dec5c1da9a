"""Real code to train on: files this machine may use legally, and windows cut from them.

Three origins, each recorded per file (package, version, licence):
- `python-stdlib`: the running interpreter's standard-library *packages* (Lib/email/, Lib/asyncio/, ...).
  Top-level Lib/*.py files are never used: the stdlib-probe evaluation corpus is drawn from them.
- `pypi`: permissively licensed packages installed beside this code (the pinned requirements), read
  through importlib.metadata; a package whose licence is not on the allow-list is refused.
- `npm`: pinned permissively licensed npm packages, fetched once with `npm pack` into a cache
  directory (the npm registry is reachable where PyPI is); their package.json gives the licence.

Standard library only; `npm` is run only when a JS package is missing from the cache.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import json
import random
import re
import subprocess
import sysconfig
import tarfile
from dataclasses import dataclass
from pathlib import Path

PERMISSIVE = ("MIT", "BSD", "Apache", "PSF", "ISC", "Python-2.0")

# Distributions from requirements.txt whose own Python source we train on (plotly's generated
# validators and tokenizers' stubs are left out: they are not code people edit by hand).
PYPI_PACKAGES = ("SQLAlchemy", "gradio", "transformers", "numpy", "huggingface_hub", "PyYAML",
                 "platformdirs", "peft", "accelerate", "pytest", "safetensors", "gguf")
NPM_PACKAGES = ("lodash@4.17.21", "express@4.21.2", "underscore@1.13.7", "axios@1.7.9",
                "commander@12.1.0", "semver@7.6.3")

STDLIB_SKIP = {"test", "tests", "idlelib", "lib2to3", "site-packages", "turtledemo", "ensurepip",
               "pydoc_data", "encodings", "__pycache__", "__phello__", "tkinter", "distutils"}
PATH_SKIP = re.compile(r"(^|/)(tests?|testing|_vendor|vendor|dist|node_modules|benchmarks?)/|\.min\.js$|\.d\.ts$")

MIN_FILE_LINES = 20
MAX_FILE_LINES = 4000
MAX_LINE_CHARS = 200


@dataclass(frozen=True)
class SourceFile:
    name: str         # stable id: "python-stdlib:email/utils.py", "pypi:numpy==2.4.6:numpy/lib/x.py"
    origin: str       # "python-stdlib" | "pypi" | "npm"
    package: str
    version: str
    license: str
    language: str     # "python" | "javascript"
    text: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


def usable_text(data: bytes) -> str | None:
    """The file's text when it is hand-written code of a trainable size, else None."""
    if b"\x00" in data:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    lines = text.splitlines()
    if not MIN_FILE_LINES <= len(lines) <= MAX_FILE_LINES:
        return None
    if any(len(line) > MAX_LINE_CHARS for line in lines) or "\r" in text:
        return None
    head = "\n".join(lines[:10]).lower()
    if "generated" in head and ("do not edit" in head or "automatically" in head):
        return None
    return text


def stdlib_files() -> list[SourceFile]:
    """Python files inside the standard library's packages (never a top-level Lib/*.py)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    version = sysconfig.get_python_version()
    out = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if len(relative.parts) < 2 or STDLIB_SKIP & set(relative.parts):
            continue
        text = usable_text(path.read_bytes())
        if text is not None:
            out.append(SourceFile(f"python-stdlib:{relative.as_posix()}", "python-stdlib", "cpython",
                                  version, "PSF-2.0", "python", text))
    return out


def distribution_license(dist: importlib.metadata.Distribution) -> str:
    """The SPDX-ish licence of an installed distribution (expression, License field or classifier)."""
    meta = dist.metadata
    for value in (meta["License-Expression"], meta["License"]):
        if value and len(value) < 60 and value.strip().upper() != "UNKNOWN":
            return value.strip()
    for classifier in meta.get_all("Classifier") or []:
        if classifier.startswith("License :: OSI Approved :: "):
            return classifier.rsplit("::", 1)[1].strip()
    return "unknown"


def is_permissive(license_name: str) -> bool:
    return any(word.lower() in license_name.lower() for word in PERMISSIVE) and "GPL" not in license_name


def pypi_files(packages: tuple[str, ...] = PYPI_PACKAGES) -> list[SourceFile]:
    """Python files of installed permissively licensed distributions. Raises ValueError for a
    distribution that is not installed or whose licence is not permissive."""
    out = []
    for name in packages:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            raise ValueError(f"training source {name} is not installed: pip install -r requirements.txt") from None
        license_name = distribution_license(dist)
        if not is_permissive(license_name):
            raise ValueError(f"training source {name}: licence {license_name!r} is not on the allow-list")
        for file in sorted(dist.files or [], key=str):
            relative = str(file)
            if not relative.endswith(".py") or ".dist-info" in relative or PATH_SKIP.search(relative):
                continue
            path = Path(str(dist.locate_file(file)))
            if not path.is_file():
                continue
            text = usable_text(path.read_bytes())
            if text is not None:
                out.append(SourceFile(f"pypi:{dist.metadata['Name']}=={dist.version}:{relative}", "pypi",
                                      dist.metadata["Name"], dist.version, license_name, "python", text))
    return out


def fetch_npm(spec: str, cache_dir: Path) -> Path:
    """The npm tarball of `spec` ("name@version"), fetched once with `npm pack` into `cache_dir`."""
    name, version = spec.rsplit("@", 1)
    tarball = cache_dir / f"{name.replace('/', '-').lstrip('@')}-{version}.tgz"
    if tarball.is_file():
        return tarball
    cache_dir.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(["npm", "pack", spec, "--pack-destination", str(cache_dir)], check=True,
                       capture_output=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as error:
        raise ValueError(f"cannot fetch npm package {spec} ({error}); install Node.js/npm or pass --no-js") from None
    if not tarball.is_file():
        raise ValueError(f"npm pack {spec} did not write {tarball.name}")
    return tarball


def npm_files(cache_dir: Path, packages: tuple[str, ...] = NPM_PACKAGES) -> list[SourceFile]:
    """JavaScript files of pinned npm packages; refuses (ValueError) a non-permissive licence."""
    out = []
    for spec in packages:
        with tarfile.open(fetch_npm(spec, cache_dir)) as archive:
            members = {m.name: m for m in archive.getmembers() if m.isfile()}
            manifest = json.loads(archive.extractfile(members["package/package.json"]).read())  # type: ignore[union-attr]
            license_name = str(manifest.get("license", "unknown"))
            if not is_permissive(license_name):
                raise ValueError(f"npm package {spec}: licence {license_name!r} is not on the allow-list")
            for member_name in sorted(members):
                relative = member_name.removeprefix("package/")
                if not relative.endswith((".js", ".mjs", ".cjs")) or PATH_SKIP.search(relative):
                    continue
                text = usable_text(archive.extractfile(members[member_name]).read())  # type: ignore[union-attr]
                if text is not None:
                    out.append(SourceFile(f"npm:{spec}:{relative}", "npm", manifest["name"], manifest["version"],
                                          license_name, "javascript", text))
    return out


# ---------------------------------------------------------------------------------------------
# Windows
# ---------------------------------------------------------------------------------------------

# Window length in lines: mostly short (training tokens are the budget: the window is shown
# numbered in the prompt and copied again in the answer), some long, up to 200.
WINDOW_BANDS = ((0.6, 20, 35), (0.3, 35, 70), (0.1, 70, 200))


def window_length(rng: random.Random) -> int:
    roll = rng.random()
    for share, low, high in WINDOW_BANDS:
        if roll < share:
            return rng.randint(low, high)
        roll -= share
    return rng.randint(WINDOW_BANDS[-1][1], WINDOW_BANDS[-1][2])


_BLOCK_START = re.compile(r"^(\s*)(def |class |async def |function |export |const |let |var |module\.exports|@)")


def cut_windows(text: str, rng: random.Random, count: int) -> list[tuple[int, str]]:
    """Up to `count` windows `(first line number, text)` of 20-200 lines, each starting at a
    definition where one is near, ending after a whole line. Windows may overlap."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if _BLOCK_START.match(line)] or [0]
    out = []
    for _ in range(count):
        length = min(window_length(rng), len(lines))
        if length < MIN_FILE_LINES:
            break
        start = rng.choice(starts) if rng.random() < 0.8 else rng.randrange(len(lines))
        start = max(0, min(start, len(lines) - length))
        body = lines[start:start + length]
        while body and not body[0].strip():
            body.pop(0)
        while body and not body[-1].strip():
            body.pop()
        if len(body) >= MIN_FILE_LINES:
            window = "".join(body)
            if not window.endswith("\n"):
                window += "\n"
            out.append((start + 1, window))
    return out
