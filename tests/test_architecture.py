"""Layout and layering rules (docs/architecture.md): what ships, and what may import what.

Three top-level packages: ``deepstack`` (schemas, catalog, CLI, API), ``deepstack.models`` (the evaluators) and
``deepstack.search``. The layers are schema/catalog ← models ← search ← cli/api; a package may use another's
public names only (a leading underscore is private to its package).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PACKAGE_DIRS = {
    "deepstack": ROOT / "deepstack",
    "deepstack.models": ROOT / "models",
    "deepstack.search": ROOT / "search",
}
TOP_LEVEL = ("deepstack.models", "deepstack.search", "deepstack")  # most specific first


def _modules():
    """(dotted module name, path) of every Python file that ships."""
    for prefix, folder in PACKAGE_DIRS.items():
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).with_suffix("")
            yield ".".join([prefix, *rel.parts]).removesuffix(".__init__"), path


def _import_statements(module: str, path: Path) -> list[tuple[str, tuple[str, ...]]]:
    """Every import of a file, lazy ones inside functions included, as (module imported, names taken from it).

    Relative imports are resolved against ``module``; ``importlib.import_module("x")`` with a literal counts too.
    """
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, ()) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            found.append((base, tuple(alias.name for alias in node.names)))
        elif isinstance(node, ast.Call) and _called(node) == "import_module" and _literal(node.args[:1]):
            found.append((node.args[0].value, ()))
    return found


def _called(call: ast.Call) -> str | None:
    """The name a call is made through: ``f`` for ``f(...)`` and ``a.f(...)``."""
    return getattr(call.func, "attr", None) or getattr(call.func, "id", None)


def _literal(args: list[ast.expr]) -> bool:
    return bool(args) and isinstance(args[0], ast.Constant) and isinstance(args[0].value, str)


def _imports(module: str, path: Path) -> set[str]:
    """Dotted names a file imports: ``from a.b import c`` yields ``a.b`` and ``a.b.c`` (c may be a module)."""
    names = set()
    for base, taken in _import_statements(module, path):
        names.add(base)
        names.update(f"{base}.{name}" for name in taken if name != "*")
    return names


def _top_level(module: str) -> str | None:
    return next((top for top in TOP_LEVEL if module == top or module.startswith(top + ".")), None)


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


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
    for folder in ("deepstack", "models", "search", "tests", "benchmarks"):
        for path in ROOT.glob(f"{folder}/**/*.py"):
            for name in _imports("", path):
                assert name.split(".")[0] not in ("models", "search"), f"{path}: bare import of {name}"


def test_layering():
    forbidden = {
        "deepstack.schema": ("deepstack.models", "deepstack.search", "deepstack.cli", "deepstack.api", "optuna",
                             "ortools", "typer", "dask"),
        "deepstack.catalog": ("deepstack.models", "deepstack.search", "deepstack.cli", "deepstack.api", "optuna",
                              "ortools", "typer", "dask"),
        "deepstack.models": ("deepstack.search", "deepstack.cli", "deepstack.api", "optuna", "ortools", "typer",
                             "dask"),
        "deepstack.search": ("deepstack.cli", "deepstack.api", "typer"),
    }
    violations = []
    for module, path in _modules():
        for layer, banned in forbidden.items():
            if module == layer or module.startswith(layer + "."):
                violations += [f"{module} imports {name}" for name in sorted(_imports(module, path))
                               if any(name == b or name.startswith(b + ".") for b in banned)]
    assert not violations, "\n".join(violations)


def test_the_layering_check_sees_every_import_form(tmp_path):
    # the checks above are only as good as the import scan: lazy, aliased, relative and importlib forms count
    path = tmp_path / "probe.py"
    path.write_text("import optuna as o\n"
                    "def f():\n"
                    "    from deepstack import cli\n"
                    "    from ..search.sweep import _chunk\n"
                    "    importlib.import_module('dask.distributed')\n")
    assert _imports("deepstack.models.probe", path) == {
        "optuna", "deepstack", "deepstack.cli", "deepstack.search.sweep", "deepstack.search.sweep._chunk",
        "dask.distributed"}


def test_no_private_imports_across_packages():
    """``from deepstack.models.x import _name`` or ``import deepstack.models._x`` from search/ (or from the CLI,
    or from models/ into search/ …) reaches into another package's internals: add an option or a public name."""
    violations = [v for module, path in _modules() for v in _private_imports_across_packages(module, path)]
    assert not violations, "private names used across packages:\n" + "\n".join(sorted(violations))


def test_the_private_import_check_allows_them_within_a_package_only(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text("from deepstack.models.evaluate import _phase, evaluate\n"
                    "import deepstack.models._kernels\n"
                    "from deepstack.search.feasibility import _feasibility\n"  # same package: allowed
                    "from deepstack.models.dvfs import clock_scale as _clock_scale\n")  # public name: allowed
    assert _private_imports_across_packages("deepstack.search.probe", path) == [
        "deepstack.search.probe imports _phase from deepstack.models.evaluate",
        "deepstack.search.probe imports _kernels from deepstack.models._kernels"]


def _private_imports_across_packages(module: str, path: Path) -> list[str]:
    home, found = _top_level(module), []
    for base, taken in _import_statements(module, path):
        target = _top_level(base)
        if target is None or target == home:
            continue
        private = [part for part in base.split(".") if _private(part)] + [name for name in taken if _private(name)]
        if private:
            found.append(f"{module} imports {', '.join(private)} from {base}")
    return found


def test_one_facade_per_heavy_dependency():
    for dependency in ("ortools", "optuna", "dask"):
        users = [m for m, p in _modules() if any(n.split(".")[0] == dependency for n in _imports(m, p))]
        assert len(users) <= 1, f"{dependency} imported by several modules: {users}"


def test_tests_are_not_a_package_and_no_root_conftest():
    assert not (ROOT / "tests" / "__init__.py").exists()
    assert not (ROOT / "conftest.py").exists()


# --- optional dependencies ----------------------------------------------------------------------------------


def test_scale_out_dependencies_are_extras_that_the_test_extra_includes():
    project = PYPROJECT["project"]
    required = {re.split(r"[<>=\[ ;]", r)[0]: r for r in project["dependencies"]}
    assert "dask" not in required and "psycopg" not in required
    # Optuna 5 (the project's requirement), and below 6: search/optimize.py writes trials into its RDB tables
    assert required["optuna"].replace(" ", "") == "optuna>=5.0,<6"
    extras = project["optional-dependencies"]
    assert [r.split(">")[0] for r in extras["dask"]] == ["dask[distributed]"]
    assert [r.split(">")[0] for r in extras["postgres"]] == ["psycopg[binary]"]
    assert f"{project['name']}[dask,postgres]" in extras["test"]


def _cli_without(module: str, *argv: str) -> subprocess.CompletedProcess:
    """The CLI in a fresh interpreter in which ``module`` cannot be imported (as if it were not installed)."""
    code = (f"import sys; sys.modules[{module!r}] = None; from deepstack.cli import main; "
            f"sys.argv = ['deepstack', *{list(argv)!r}]; main()")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_dask_backend_without_dask_names_the_extra(tmp_path):
    done = _cli_without("dask", "sweep", "--mode", "exhaustive", "--space", "small", "--backend", "dask",
                        "--workers", "1", "--out", str(tmp_path / "sweep"))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        'deepstack: error: --backend dask needs Dask: pip install "deepstack-dse[dask]"']


def test_postgresql_storage_without_psycopg_names_the_extra(tmp_path):
    done = _cli_without("psycopg", "optimize", "--space", "small", "--trials", "1", "--storage",
                        "postgresql://user@127.0.0.1:1/studies", "--out", str(tmp_path))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        'deepstack: error: --storage: a PostgreSQL URL needs psycopg: pip install "deepstack-dse[postgres]"']
