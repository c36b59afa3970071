"""Every named kind a file or a flag may name, declared once: topologies, collective algorithms, preset folders.

A name is declared in one place, with what it carries (a topology's class, an algorithm's instance, a catalog
folder), by the code that implements it; the schema validates files against these registries, the CLI lists
them, and an error names the registered names once. What declares them:

* the built-ins, on import of the modules that define them (``deepstack.models.network`` for topologies,
  ``deepstack.models.collectives`` for algorithms);
* plugins: every entry point of the group ``deepstack.plugins`` of an installed distribution (an object, usually
  a function, that is called with no argument, or a module that registers on import), through the public
  ``register_topology``, ``register_algorithm`` and :func:`register_catalog`.

Both load the first time a registry is consulted (:func:`load_plugins`, once per process), so ``import
deepstack`` stays fast and the schema never imports the models itself.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Generic, TypeVar

from deepstack.errors import UserInputError

T = TypeVar("T")
PLUGIN_GROUP = "deepstack.plugins"
# the modules that declare the built-ins on import (the first "plugin": they use the same registries)
_BUILT_INS = ("deepstack.models.network", "deepstack.models.collectives")


class Registry(Generic[T]):
    """The declared names of one kind, in declaration order (built-ins first), each with its value."""

    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, T] = {}
        self.generation = 0  # bumped by every change: a reader may cache what it derives from the registry

    def declare(self, name: str, value: T) -> T:
        """Declare ``name`` (a new one, or again by the same code: a re-import replaces it)."""
        if not isinstance(name, str) or not name or name != name.strip():
            raise ValueError(f"{self.kind}: a name must be a non-empty string without surrounding spaces "
                             f"(got {name!r})")
        self._items[name] = value
        self.generation += 1
        return value

    def forget(self, name: str) -> None:
        if self._items.pop(name, None) is not None:
            self.generation += 1

    def names(self) -> tuple[str, ...]:
        load_plugins()
        return self.declared()

    def declared(self) -> tuple[str, ...]:
        """The names declared so far, without loading the built-ins or plugins."""
        return tuple(self._items)

    def items(self) -> Iterator[tuple[str, T]]:
        load_plugins()
        return iter(tuple(self._items.items()))

    def __contains__(self, name: object) -> bool:
        load_plugins()
        return name in self._items

    def get(self, name: str) -> T:
        """The value of a declared name; ValueError naming every declared one otherwise."""
        load_plugins()
        if name not in self._items:
            raise ValueError(f"must be one of {', '.join(self._items)} (got {name!r})")
        return self._items[name]


TOPOLOGIES: Registry[Any] = Registry("topology")  # name → the Topology class (deepstack.models.network)
ALGORITHMS: Registry[Any] = Registry("collective algorithm")  # name → the Algorithm (deepstack.models.collectives)
CATALOGS: Registry[Path] = Registry("catalog")  # a plugin's name → its folder of llms/ chips/ nocs/ systems/


def register_catalog(name: str, folder: str | Path) -> Path:
    """Add a folder of presets (subfolders ``llms``, ``chips``, ``nocs``, ``systems`` of ``.toml`` files, as
    the package's own catalog) under the plugin's ``name``: its presets are named like the built-in ones."""
    path = Path(folder)
    if not path.is_dir():
        raise UserInputError(f"catalog {name}: {path} is not a folder")
    return CATALOGS.declare(name, path)


class DeepStackPluginError(UserInputError):
    """An installed plugin failed to load or to register what it declares."""


_state: dict[str, Any] = {"loaded": False, "error": None}


def load_plugins() -> None:
    """Declare the built-ins and run every installed plugin, once per process. A plugin that fails is reported
    by this and every later call (:class:`DeepStackPluginError`, one line naming it): the registries would be
    incomplete, so nothing may use them until it is fixed or uninstalled."""
    if not _state["loaded"]:
        _state["loaded"] = True  # first: the modules loaded below declare into the registries
        for module in _BUILT_INS:
            importlib.import_module(module)
        for point in sorted(entry_points(group=PLUGIN_GROUP), key=lambda p: p.name):
            try:
                loaded = point.load()
                if callable(loaded):
                    loaded()
            except Exception as exc:  # the user's plugin: one line naming it, never a traceback
                _state["error"] = DeepStackPluginError(
                    f"plugin {point.name} ({point.value}, entry point group {PLUGIN_GROUP}): "
                    f"{type(exc).__name__}: {exc}")
                break
    if _state["error"] is not None:
        raise _state["error"]


def plugin_names() -> tuple[str, ...]:
    """The installed plugins' entry point names."""
    return tuple(sorted(p.name for p in entry_points(group=PLUGIN_GROUP)))


def registered(registry: Registry[Any], predicate: Callable[[Any], bool]) -> tuple[str, ...]:
    """The names of ``registry`` whose value satisfies ``predicate``, in declaration order."""
    return tuple(name for name, value in registry.items() if predicate(value))
