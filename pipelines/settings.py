"""Where weft reads and writes: ``WEFT_HOME`` for every artifact, ``WEFT_DATA_DIR`` for local data.

``WEFT_HOME`` (default ``./.weft``) holds the warehouse, caches, converted models, checkpoints
and logs; nothing is written anywhere else. ``WEFT_DATA_DIR`` points at local copies of public
datasets (default: ``../shared/data`` next to the checkout when it exists). Functions here only
compute paths; callers create directories when they write.
"""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def weft_home() -> Path:
    """The artifact root, from ``WEFT_HOME`` or ``./.weft`` in the current directory."""
    return Path(os.environ.get("WEFT_HOME") or Path.cwd() / ".weft").resolve()


def data_dir() -> Path | None:
    """Local copies of public datasets, or None when there are none on this machine."""
    env = os.environ.get("WEFT_DATA_DIR")
    if env:
        return Path(env).resolve()
    for candidate in (PROJECT_ROOT.parent / "shared" / "data", Path.cwd().parent / "shared" / "data"):
        if candidate.is_dir():
            return candidate.resolve()
    return None


def require_data_dir() -> Path:
    """Like :func:`data_dir` but raises a clear error when no local data directory exists."""
    found = data_dir()
    if found is None or not found.is_dir():
        raise FileNotFoundError(
            "No local data directory: set WEFT_DATA_DIR to a folder with benchmarks/, train/, "
            "traces/ and tir/ subfolders (the layout of ../shared/data)."
        )
    return found


def models_dir() -> Path:
    return weft_home() / "models"


def cache_dir() -> Path:
    return weft_home() / "cache"


def logs_dir() -> Path:
    return weft_home() / "logs"
