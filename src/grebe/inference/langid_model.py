"""py3langid's model, decoded once per machine instead of at every engine start.

py3langid ships its model as an LZMA-compressed npz (4.6 MB on disk, 68 MB decoded) and
decompresses it on every `LanguageIdentifier.from_model_file`: ~0.45 s of CPU per engine
start, a fifth of an engine's start-up (py-spy, docs/benchmarks.md "Real flows"). Here
the decoded arrays are written once as plain `.npy` files under the cache directory
(`grebe.inference.machine_cache`), keyed by the model file's size and modification
time and py3langid's version, and later starts map
them (the big probability table stays a read-only memory map shared by every engine).

The identifier is built from exactly the arrays py3langid's own loader returns, so its
guesses are the same. A cache that cannot be written (read-only home) or read (a file
cut short) costs only the slow path: the model is then decoded as py3langid does it.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from array import array
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from grebe.inference.machine_cache import cache_root, publish, source_key

log = logging.getLogger(__name__)

#: The arrays of py3langid's model file (grebe reads them by these names).
_ARRAYS = ("ptc", "pc", "classes", "nextmove", "nextmove_row", "out_feat")
_TYPECODES = {2: "H", 4: "I", 8: "L"}  # unsigned item size -> array typecode


def model_file() -> Path:
    from py3langid.langid import MODEL_DIR, MODEL_FILE

    path = Path(MODEL_FILE)
    return path if path.is_absolute() else Path(MODEL_DIR) / path


def _cache_dir(source: Path) -> Path:
    return cache_root() / "py3langid" / source_key(source, metadata.version("py3langid"))


def _unsigned(values: np.ndarray) -> array:
    """What py3langid keeps its DFA tables as: a stdlib array of unsigned ints."""
    out = array(_TYPECODES[values.dtype.itemsize])
    out.frombytes(np.ascontiguousarray(values).data.cast("B"))
    return out


def _decode(source: Path) -> dict[str, np.ndarray]:
    """The model file's arrays, decoded as py3langid.modelio.load_model reads them."""
    import lzma

    with tempfile.TemporaryFile(suffix=".npz") as tmp:
        with lzma.open(source) as compressed:
            shutil.copyfileobj(compressed, tmp, length=1 << 20)
        tmp.seek(0)
        with np.load(tmp, allow_pickle=False) as data:
            return {name: data[name] for name in _ARRAYS}


def _write(directory: Path, arrays: dict[str, np.ndarray]) -> None:
    def save(staging: Path) -> None:
        for name, values in arrays.items():
            np.save(staging / f"{name}.npy", values, allow_pickle=False)

    publish(directory, save)


def _read(directory: Path) -> dict[str, np.ndarray] | None:
    try:
        return {name: np.load(directory / f"{name}.npy", mmap_mode="r", allow_pickle=False)
                for name in _ARRAYS}
    except (OSError, ValueError):
        return None


def load_arrays() -> dict[str, np.ndarray]:
    """The model's arrays: from the cache, else decoded (and cached for next time)."""
    source = model_file()
    directory = _cache_dir(source)
    if directory.is_dir():
        cached = _read(directory)
        if cached is not None:
            return cached
        log.warning("py3langid's cached model in %s is damaged; decoding it again", directory)
        shutil.rmtree(directory, ignore_errors=True)
    arrays = _decode(source)
    try:
        _write(directory, arrays)
    except OSError as exc:
        log.warning("cannot cache py3langid's decoded model in %s: %s", directory, exc)
    return arrays


def load_identifier(languages: list[str] | None = None) -> Any:
    """A py3langid LanguageIdentifier with normalised probabilities (as
    `LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)`), restricted to
    `languages` when given."""
    from py3langid.langid import LanguageIdentifier

    arrays = load_arrays()
    nextmove = np.asarray(arrays["nextmove"])
    identifier = LanguageIdentifier(
        np.asarray(arrays["ptc"]), np.asarray(arrays["pc"]),
        np.asarray(arrays["classes"]).tolist(), _unsigned(nextmove),
        np.asarray(arrays["out_feat"]).tolist(), norm_probs=True,
        tk_row=_unsigned(np.asarray(arrays["nextmove_row"])),
    )
    if languages:
        identifier.set_languages(languages)
    return identifier


def main() -> None:
    """`python -m grebe.inference.langid_model prepare`: decode and cache the model now
    (scripts/install.sh), so the first engine start is as fast as the later ones."""
    import sys

    if sys.argv[1:] != ["prepare"]:
        raise SystemExit("usage: python -m grebe.inference.langid_model prepare")
    load_arrays()
    print(_cache_dir(model_file()))


if __name__ == "__main__":
    main()
