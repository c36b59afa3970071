"""Layout and layering rules of DESIGN.md §1."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PACKAGE_DIRS = {
    "deepstack": ROOT / "deepstack",
    "deepstack.models": ROOT / "models",
    "deepstack.search": ROOT / "search",
}
IMPORT = re.compile(r"^\s*(?:from|import)\s+([\w.]+)", re.MULTILINE)


def _modules():
    """(dotted package prefix, path) of every Python file that ships."""
    for prefix, folder in PACKAGE_DIRS.items():
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).with_suffix("")
            yield ".".join([prefix, *rel.parts]).removesuffix(".__init__"), path


def _imports(path: Path) -> set[str]:
    return set(IMPORT.findall(path.read_text()))


def test_every_package_is_listed_in_pyproject():
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    found = set()
    for prefix, folder in PACKAGE_DIRS.items():
        for init in folder.rglob("__init__.py"):
            rel = init.parent.relative_to(folder)
            found.add(".".join([prefix, *rel.parts]))
    assert found == listed, f"missing from pyproject: {found - listed}; stale: {listed - found}"


def test_package_dir_mapping():
    mapping = PYPROJECT["tool"]["setuptools"]["package-dir"]
    assert mapping == {"deepstack.models": "models", "deepstack.search": "search"}


def test_no_bare_models_or_search_imports():
    for path in [*ROOT.glob("deepstack/**/*.py"), *ROOT.glob("models/**/*.py"), *ROOT.glob("search/**/*.py"),
                 *ROOT.glob("tests/**/*.py"), *ROOT.glob("benchmarks/**/*.py")]:
        for name in _imports(path):
            assert name.split(".")[0] not in ("models", "search"), f"{path}: bare import of {name}"


def test_layering():
    forbidden = {
        "deepstack.schema": ("deepstack.models", "deepstack.search", "deepstack.cli", "deepstack.api", "optuna",
                             "ortools", "typer", "dask"),
        "deepstack.catalog": ("deepstack.models", "deepstack.search", "deepstack.cli", "optuna", "ortools", "typer"),
        "deepstack.models": ("deepstack.search", "deepstack.cli", "deepstack.api", "optuna", "ortools", "typer",
                             "dask"),
        "deepstack.search": ("deepstack.cli", "typer"),
    }
    for module, path in _modules():
        for layer, banned in forbidden.items():
            if module == layer or module.startswith(layer + "."):
                for name in _imports(path):
                    assert not any(name == b or name.startswith(b + ".") for b in banned), f"{module} imports {name}"


def test_one_facade_per_heavy_dependency():
    for dependency in ("ortools", "optuna", "dask"):
        users = [m for m, p in _modules() if any(n.split(".")[0] == dependency for n in _imports(p))]
        assert len(users) <= 1, f"{dependency} imported by several modules: {users}"


def test_tests_are_not_a_package_and_no_root_conftest():
    assert not (ROOT / "tests" / "__init__.py").exists()
    assert not (ROOT / "conftest.py").exists()
