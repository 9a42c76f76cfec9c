"""Counting a server ledger's round trips from outside the client: a loopback TCP proxy in
front of a PostgreSQL server that counts, per client connection, how many times the server
answered after the client had sent something (one request-and-answer turn: a round trip on a
network, however many statements the client packed into it, pipelined or not).

Used by tests/test_pg_round_trips.py and bench/bench_team.py. Nothing here knows psycopg: what
it counts is bytes on the wire."""

from __future__ import annotations

import selectors
import socket
import threading
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit


@dataclass
class Wire:
    """One client connection through the proxy: its turns and what the client sent."""

    turns: int = 0
    sent: bytearray = field(default_factory=bytearray)

    def says(self, needle: bytes) -> bool:
        return needle in self.sent


class TurnCounter:
    """A proxy on 127.0.0.1 (`port`) to the server at `target` (a Unix socket path or a
    (host, port)); `wires` lists the connections made through it, in order."""

    def __init__(self, target: str | tuple[str, int]) -> None:
        self.target = target
        self.wires: list[Wire] = []
        self._lock = threading.Lock()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = int(self._listener.getsockname()[1])
        self._stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, url: str) -> str:
        """`url` (a server URL reaching `target`) rewritten to go through this proxy."""
        parts = urlsplit(url)
        query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
                 if k not in ("host", "port")]
        user = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
        return urlunsplit((parts.scheme, f"{user}127.0.0.1:{self.port}", parts.path,
                           urlencode(query, quote_via=quote), ""))

    @classmethod
    def before(cls, url: str) -> TurnCounter:
        """A proxy in front of the server `url` reaches (its Unix socket or host:port)."""
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query))
        host = query.get("host") or parts.hostname or "127.0.0.1"
        port = int(query.get("port") or parts.port or 5432)
        if host.startswith("/"):
            return cls(f"{host}/.s.PGSQL.{port}")
        return cls((host, port))

    def snapshot(self) -> list[int]:
        with self._lock:
            return [w.turns for w in self.wires]

    def close(self) -> None:
        self._stopped = True
        self._listener.close()

    def _connect(self) -> socket.socket:
        if isinstance(self.target, str):
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        else:
            upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        upstream.connect(self.target)
        return upstream

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            wire = Wire()
            with self._lock:
                self.wires.append(wire)
            threading.Thread(target=self._pump, args=(client, self._connect(), wire),
                             daemon=True).start()

    def _pump(self, client: socket.socket, server: socket.socket, wire: Wire) -> None:
        """Forward both ways in one thread, so the order bytes were seen in is the order they
        went: a turn is counted when the server speaks after the client did."""
        sel = selectors.DefaultSelector()
        sel.register(client, selectors.EVENT_READ, "c")
        sel.register(server, selectors.EVENT_READ, "s")
        asked = False
        try:
            while True:
                for key, _ in sel.select():
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    data = sock.recv(65536)
                    if not data:
                        return
                    if key.data == "c":
                        asked = True
                        if len(wire.sent) < 65536:
                            wire.sent += data[:4096]
                        server.sendall(data)
                    else:
                        if asked:
                            with self._lock:
                                wire.turns += 1
                            asked = False
                        client.sendall(data)
        except OSError:
            return
        finally:
            sel.close()
            client.close()
            server.close()
