"""What already occupies a server address that `custody-app copy` would write a ledger to: its
schema, or its key store's schema (`<schema>_keys`), holding any table, view or sequence.
Read without changing anything (no schema is created by asking)."""

from __future__ import annotations

from store.postgres.opening import connect

RELATIONS = ("SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
             "WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S') "
             "ORDER BY c.relname LIMIT 6")


def occupant(url: str) -> str | None:
    """What the ledger schema the address names, or its key store schema, holds (a few of
    its relations named); None when both are empty or missing. An unreachable server is a
    StoreError (`ledger_unopenable`), never "empty"."""
    conn, schema, _shown = connect(url)
    try:
        for name in (schema, f"{schema}_keys"):
            found = [str(r[0]) for r in conn.execute(RELATIONS, (name,))]
            if found:
                more = ", ..." if len(found) > 5 else ""
                return f"the schema {name} with {', '.join(found[:5])}{more}"
        return None
    finally:
        conn.close()
