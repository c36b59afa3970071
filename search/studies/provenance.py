"""Which code produced a study's results: a digest of the package's source and catalog files.

``run.json`` records it, so a reader of the results (``deepstack accuracy paper``) can tell results computed by
the code it is running from stale ones: any change to a law, a preset or a runner changes the digest.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import json
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from deepstack.registry import PLUGIN_GROUP
from deepstack.schema.loader import SUFFIXES

_PACKAGES = ("deepstack", "deepstack.models", "deepstack.search")  # three folders: models/ and search/ sit beside
_SOURCES = ("*.py", "*.toml")  # the laws and runners, and the presets (chips, NoCs, models, spaces)


def digest_of(roots: dict[str, Path]) -> str:
    """SHA-256 (hex, first 16 digits) over the name and bytes of every source and preset file under each root (a
    folder, or one module's file)."""
    digest = hashlib.sha256()
    for name, root in sorted(roots.items()):
        if root.is_file():
            files, root = [root], root.parent
        else:
            files = sorted({f for pattern in _SOURCES for f in root.rglob(pattern) if "__pycache__" not in f.parts})
        for path in files:
            digest.update(f"{name}/{path.relative_to(root).as_posix()}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@functools.cache
def code_digest() -> str:
    """The digest of the code now running: its three package folders and every installed plugin's code (a plugin
    can change what a built-in design point computes: the automatic choice ranks its collective algorithms too)."""
    packages = {name: Path(importlib.import_module(name).__file__).parent for name in _PACKAGES}
    return digest_of(packages | _plugin_code())


def _plugin_code() -> dict[str, Path]:
    """Each installed plugin's package folder (or module file), by its entry point's name; none without plugins,
    so the digest is then that of the package alone."""
    out = {}
    for point in entry_points(group=PLUGIN_GROUP):
        module = point.value.split(":")[0].strip()
        spec = importlib.util.find_spec(module.split(".")[0])  # the plugin's whole top-level package
        if spec is not None and spec.origin is None:  # a namespace package: its portions are others' too
            spec = importlib.util.find_spec(module)
        if spec is not None and spec.submodule_search_locations:
            out[f"plugin:{point.name}"] = Path(next(iter(spec.submodule_search_locations)))
        elif spec is not None and spec.origin:
            out[f"plugin:{point.name}"] = Path(spec.origin)
    return out


def json_digest(value: Any) -> str:
    """SHA-256 (hex) of ``value`` as JSON with sorted keys: the same for equal content, whatever its order."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def presets_digest(space) -> str:
    """SHA-256 (hex) of the content of every chip and NoC file a design space names, as loaded now (a space holds
    them only by name or path, so an edited file changes this, not the space)."""
    from deepstack.search.space import named_presets

    presets = {ref: preset.model_dump(mode="json") for ref, preset in named_presets(space).items()}
    return json_digest(presets)


def space_inputs_digest(space) -> str:
    """A digest (16 hex digits) of everything a search of ``space`` reads from files: the space's own content and
    that of every chip and NoC file it names."""
    both = {"space": space.model_dump(mode="json"), "presets": presets_digest(space)}
    return json_digest(both)[:16]


def _files_named(value: Any) -> Iterator[str]:
    """Every string in a recipe's parameters (nested lists and tables too) that names a file."""
    if isinstance(value, str) and value.lower().endswith(SUFFIXES):  # a space, a NoC beside the recipe
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _files_named(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _files_named(item)


def inputs_digest(recipe_folder: Path, params: dict[str, Any]) -> str:
    """A digest (16 hex digits) of what a study run reads from outside the package: its parameters (the recipe's,
    with the quick overlay and the assumption set) and the bytes of every file they name, resolved as the runner
    resolves them (against the recipe's folder); not the files those files name in turn (a space's own NoC files).
    A run whose inputs' digest differs from its recipe's today is stale, whatever the code."""
    digest = hashlib.sha256(json.dumps(params, sort_keys=True, default=str).encode())
    for ref in sorted(set(_files_named(params))):
        digest.update(f"\0{ref}\0".encode())
        try:
            digest.update((recipe_folder / ref).read_bytes())
        except OSError:
            digest.update(b"(missing)")
    return digest.hexdigest()[:16]
