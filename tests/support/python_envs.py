"""Python environments for a cluster test: a node's Python without rotsink, rotsink's wheel,
and a packed environment for ``spark.archives``.

Each is what ``docs/cluster.md`` tells a user to make, built quickly: ``pip`` runs from this
interpreter into venvs made without pip (``pip --python``), at the versions this environment
has (a constraints file of every installed distribution, so pip's local cache serves them),
without byte-compiling (``--no-compile``: a Python worker compiles what it imports), and the
pack is stored uncompressed (it only crosses loopback). Nothing but PyPI is reached, and only
for what pip's cache lacks.
"""

from __future__ import annotations

import email
import importlib.metadata
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

PROJECT_ROOT = Path(__file__).resolve().parents[2]
# Executors import PySpark from SPARK_HOME's pyspark.zip (first on their PYTHONPATH), never
# from the pack: PySpark's 400 MB, and py4j with it, stay out of it.
NOT_PACKED = ("pyspark", "py4j")


def build_wheel(dest: Path) -> Path:
    """rotsink's wheel, built from this checkout (``pip wheel``; its build backend comes from
    PyPI or pip's cache)."""
    _pip("wheel", "--no-deps", "--wheel-dir", str(dest), str(PROJECT_ROOT))
    (wheel,) = dest.glob("rotsink-*.whl")
    return wheel


def constraints(dest: Path) -> Path:
    """A pip constraints file pinning every distribution installed here, rotsink excepted."""
    pins: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = canonicalize_name(dist.metadata["Name"] or "")
        if name and name != "rotsink":
            pins.setdefault(name, f"{name}=={dist.version}")
    dest.write_text("\n".join(sorted(pins.values())) + "\n")
    return dest


def make_venv(path: Path, requirements: Sequence[str], *, pinned: Path,
              no_deps: Sequence[Path] = ()) -> Path:
    """A venv of this interpreter's base Python with ``requirements`` (and ``no_deps``, wheels
    installed without their dependencies); returns its ``bin`` directory."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = str(path / "bin" / "python")
    _pip("--python", python, "install", "--no-compile", "--constraint", str(pinned),
         *requirements)
    if no_deps:  # after the rest: pip then has no missing dependency to warn about
        _pip("--python", python, "install", "--no-compile", "--no-deps", *map(str, no_deps))
    return path / "bin"


def runtime_requirements(wheel: Path, *, leave_out: Sequence[str] = NOT_PACKED) -> list[str]:
    """The wheel's own dependencies (no extras), less ``leave_out``."""
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = email.message_from_bytes(archive.read(name))
    wanted = []
    for line in metadata.get_all("Requires-Dist") or []:
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        if canonicalize_name(requirement.name) not in leave_out:
            wanted.append(str(requirement))
    return wanted


def pack(env: Path, archive: Path) -> Path:
    """``env`` as a ``.tar.gz`` for ``spark.archives`` (venv-pack; stored, not compressed).

    ``.tar.gz`` because Spark unpacks it with the system's ``tar``, which keeps the venv's
    ``bin/python`` symlink to the base interpreter; a plain ``.tar`` goes through Spark's Java
    unpacker, which refuses that link as an entry "outside" the directory."""
    import venv_pack

    venv_pack.pack(prefix=str(env), output=str(archive), compress_level=0)
    return archive


def _pip(*arguments: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet",
                    *arguments], check=True, stdin=subprocess.DEVNULL)
