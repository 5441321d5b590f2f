"""`ragloop dev ...`: local services for development and tests.

    ragloop dev pgvector-server --dir ~/.ragloop/pgvector --port 5433     # prints the URL
    ragloop dev pgvector-server --dir ~/.ragloop/pgvector --stop

Only the URL goes to stdout, so `export RAGLOOP_COLLECTIONS_URL=$(ragloop dev pgvector-server ...)`
works; what happened goes to stderr.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ragloop.cli.common import JsonOpt, console, fail, out, print_json

app = typer.Typer(help="Local services for development and tests.", no_args_is_help=True)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="dev")


@app.command("pgvector-server")
def pgvector_server(
    directory: Annotated[Path, typer.Option("--dir", help="Data folder (created on first use).")] = Path(
        "~/.ragloop/pgvector"
    ),
    port: Annotated[int, typer.Option("--port", help="TCP port on --host.")] = 5433,
    host: Annotated[str, typer.Option("--host", help="Interface to listen on.")] = "127.0.0.1",
    os_user: Annotated[
        str | None, typer.Option("--os-user", help="When run as root: the OS account the server runs as.")
    ] = None,
    stop: Annotated[bool, typer.Option("--stop", help="Stop the server of --dir instead.")] = False,
    json_: JsonOpt = False,
) -> None:
    """Start a PostgreSQL with pgvector (from the pgserver wheel) and print its URL."""
    from ragloop.store.pgvector_server import PgServerError, bin_dir, start_server, stop_server

    try:
        if stop:
            stopped = stop_server(directory, os_user=os_user)
            console.print("stopped" if stopped else f"no server running in {directory}")
            return
        server = start_server(directory, port=port, host=host, os_user=os_user)
    except PgServerError as exc:
        fail(str(exc))
    if server.port != port:
        console.print(f"already running on port {server.port} (not {port}); stop it first to move it")
    console.print(f"pgvector server pid {server.pid}, data {server.data_dir}; stop: ragloop dev pgvector-server --stop")
    if json_:
        print_json(
            {
                "url": server.url,
                "pid": server.pid,
                "port": server.port,
                "data_dir": str(server.data_dir),
                "bin_dir": str(bin_dir()),  # psql / pg_dump matching the server's version (18)
            }
        )
    else:
        out.print(server.url, highlight=False, soft_wrap=True)
