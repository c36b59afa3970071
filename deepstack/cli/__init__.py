"""Command line: parse → deepstack.api → render. User errors become one line on stderr and exit status 2.

One module per group of commands: ``common`` (the app, shared options and helpers), ``presets`` (catalog,
validate), ``evaluation`` (evaluate, strategies, collective, kernel), ``search`` (optimize, sweep, compare,
dashboard), ``study`` and ``accuracy`` (the sub-apps). The commands are registered here, in the order
``deepstack --help`` lists them.
"""

from __future__ import annotations

import sys

import typer

from deepstack.cli.accuracy import accuracy_app
from deepstack.cli.common import app
from deepstack.cli.evaluation import collective, evaluate, kernel, strategies
from deepstack.cli.presets import catalog, validate
from deepstack.cli.search import compare, dashboard, optimize, sweep
from deepstack.cli.study import study_app
from deepstack.errors import RunInterruptedError, UserInputError
from deepstack.registry import load_plugins
from deepstack.report import end_on_broken_pipe

__all__ = ["app", "catalog", "collective", "compare", "dashboard", "evaluate", "kernel", "main", "optimize", "run",
           "strategies", "sweep", "validate"]

for _command in (catalog, validate, evaluate, strategies, collective, kernel, optimize, sweep, compare, dashboard):
    app.command()(_command)
app.add_typer(study_app, name="study")
app.add_typer(accuracy_app, name="accuracy")


def _fail(message: str) -> int:
    print(f"deepstack: error: {' '.join(message.split())}", file=sys.stderr)
    return 2


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return the exit status (2 for any user error, with one line on stderr)."""
    from deepstack.models import tune_gc

    tune_gc()  # every command may evaluate many design points; forked workers inherit the setting
    command = typer.main.get_command(app)
    try:
        load_plugins()  # a broken plugin: one line naming it, exit 2
        result = command.main(args=argv, prog_name="deepstack", standalone_mode=False)
    except UserInputError as exc:
        return _fail(str(exc))
    except RunInterruptedError as exc:
        print(f"deepstack: {exc}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        # Typer ships its own copy of click in recent releases, so match click's exceptions by shape.
        name = type(exc).__name__
        if name == "Exit":
            return exc.exit_code
        if name == "Abort":
            return 130
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
            return _fail(exc.format_message())
        raise
    return result if isinstance(result, int) else 0


def main() -> None:
    status = run()
    try:
        sys.stdout.flush()  # what is still buffered meets a reader that went away here, not in Python's exit
    except BrokenPipeError:
        status = end_on_broken_pipe()
    sys.exit(status)
