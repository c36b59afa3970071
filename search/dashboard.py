"""optuna-dashboard on a study storage (served with the standard library's WSGI server)."""

from __future__ import annotations

from wsgiref.simple_server import WSGIRequestHandler, make_server

from deepstack.errors import UserInputError


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args) -> None:
        pass


def app(storage_url: str):
    """The dashboard's WSGI application for ``storage_url`` (SQLite file must exist)."""
    import optuna_dashboard

    from deepstack.search.storage_paths import check_storage_url, is_journal, storage_file

    check_storage_url(storage_url)
    path = storage_file(storage_url)
    if path is not None and not path.exists():
        raise UserInputError(f"--storage: no study {'journal' if is_journal(storage_url) else 'database'} at {path}")
    storage = storage_url
    if is_journal(storage_url):  # the forms `optimize` documents; the dashboard takes a storage object
        from deepstack.search.optimize import open_storage

        storage = open_storage(storage_url)
    try:
        return optuna_dashboard.wsgi(storage)
    except Exception as exc:
        raise UserInputError(f"--storage: cannot open {storage_url!r}: {str(exc).splitlines()[0][:200]}") from None


def make(storage_url: str, host: str, port: int):
    """A WSGI server bound to (host, port), not yet serving."""
    if not 0 <= port <= 65535:
        raise UserInputError(f"--port: must be in 0..65535 (got {port})")
    try:
        return make_server(host, port, app(storage_url), handler_class=_QuietHandler)
    except OSError as exc:
        raise UserInputError(f"--host/--port: cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def serve(storage_url: str, host: str, port: int) -> None:
    serve_forever(make(storage_url, host, port))


def serve_forever(server) -> None:
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
