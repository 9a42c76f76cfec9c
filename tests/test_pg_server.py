"""The tests' PostgreSQL server itself: a real server, not run as root, with pgvector, a fresh
database per test."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psycopg


def test_the_server_is_postgresql_18_with_pgvector_and_a_fresh_database(pg_url: str) -> None:
    with psycopg.connect(pg_url) as conn:
        version = conn.execute("SHOW server_version_num").fetchone()[0]
        assert int(version) >= 150000
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        assert conn.execute("SELECT '[1,2]'::vector <-> '[1,3]'::vector").fetchone()[0] == 1.0
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
        assert tables.fetchone()[0] == 0


def test_the_server_does_not_run_as_root(pg_server: Any) -> None:
    if pg_server.process is None:  # CUSTODY_TEST_PG_URL: a server the tests did not start
        return
    status = Path(f"/proc/{pg_server.process.pid}/status").read_text()
    uid = int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])
    assert uid != 0 and (os.geteuid() != 0 or uid == 65534)


def test_each_test_gets_its_own_database(pg_server: Any) -> None:
    first, second = pg_server.fresh_database(), pg_server.fresh_database()
    try:
        assert first != second
        with psycopg.connect(first) as conn:
            conn.execute("CREATE TABLE mine(x int)")
            conn.commit()
        with psycopg.connect(second) as conn:
            assert conn.execute("SELECT to_regclass('mine')").fetchone()[0] is None
    finally:
        pg_server.drop_database(first)
        pg_server.drop_database(second)
