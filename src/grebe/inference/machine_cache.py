"""Files derived once per machine from installed packages (grebe's integer MiniLM,
py3langid's decoded model): one cache root, one key, and one way to publish a build, so
engines that start together never read half of one.

The key is the source file's size and modification time plus the versions that shape the
result: cheap to read at every start (hashing the 23 MB MiniLM cost ~19 ms of CPU per
start), and a reinstalled package gets a new key.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

CACHE_ENV = "GREBE_CACHE_DIR"


def cache_root() -> Path:
    """`$GREBE_CACHE_DIR`, else `$XDG_CACHE_HOME/grebe`, else `~/.cache/grebe`."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "grebe"


def source_key(source: Path, *versions: str) -> str:
    """16 hex digits naming what a build was derived from."""
    stat = source.stat()
    text = "|".join([str(source.resolve()), str(stat.st_size), str(stat.st_mtime_ns), *versions])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def publish(directory: Path, build: Callable[[Path], None]) -> None:
    """Run `build` into a fresh staging directory beside `directory`, then rename it into
    place: a reader sees the whole build or none of it, and when another process got
    there first its build stands (it is as good). OSError when nothing can be written."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=directory.parent))
    try:
        build(staging)
        with contextlib.suppress(OSError):
            staging.rename(directory)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
