"""Real parts for the tests: the service binary, a private redis-server, a private
PostgreSQL cluster, and a small HTTP-aware TCP proxy that can drop a reply or cut
every connection. Nothing here sleeps to synchronise: each start waits for the part
to answer (readiness polled at short intervals, bounded by a deadline)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import httpx

REPO_ROOT = Path(__file__).resolve().parents[3]
PG_BIN = Path(os.environ.get("LEASEHOLD_PG_BIN", "/usr/lib/postgresql/15/bin"))


class MissingPart(RuntimeError):
    """A real part the tests need is not installed: never skipped, always a failure."""


def service_binary() -> Path:
    path = Path(os.environ.get("LEASEHOLD_BIN", REPO_ROOT / "target" / "debug" / "leasehold"))
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise MissingPart(
            f"the leasehold service binary is missing at {path}: build it with "
            "`cargo build --bin leasehold` at the repository root, or point LEASEHOLD_BIN "
            "at a built binary"
        )
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.02)
    raise TimeoutError(f"{what} not ready within {timeout} s")


@dataclass
class Redis:
    port: int
    proc: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def cli(self, *args: str) -> str:
        out = subprocess.run(
            ["redis-cli", "-p", str(self.port), *args],
            check=True,
            capture_output=True,
            timeout=10,
        )
        return out.stdout.decode().strip()

    def freeze(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        self.thaw()
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start_redis() -> Redis:
    exe = shutil.which("redis-server")
    if exe is None:
        raise MissingPart("redis-server is not installed (apt-get install redis-server)")
    port = free_port()
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    redis = Redis(port, proc)

    def ready() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    try:
        wait_until(ready, 10, "redis-server")
    except TimeoutError:
        redis.stop()
        raise
    return redis


@dataclass
class Service:
    url: str
    proc: subprocess.Popen[bytes]
    namespace: str
    redis: Optional[Redis] = None
    log: Path = field(default_factory=lambda: Path(os.devnull))

    @property
    def store(self) -> str:
        return "redis" if self.redis else "memory"

    def lease_key(self, purpose: str, digest: str) -> str:
        """The Redis key of a resource's lease record (docs/decisions/storage-v2.md)."""
        return f"{self.namespace}:lease:v2:{{{purpose}:{digest}}}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_service(
    redis: Optional[Redis] = None, ca_file: Optional[str] = None, **env: str
) -> Service:
    """The service on a free loopback port (HTTPS when ``LEASEHOLD_TLS_CERT_FILE`` is
    given; ``ca_file`` then verifies it while waiting for readiness)."""
    binary = service_binary()
    port = free_port()
    namespace = "t" + uuid.uuid4().hex[:12]
    full_env = dict(os.environ)
    full_env.update(
        LEASEHOLD_LISTEN=f"127.0.0.1:{port}",
        LEASEHOLD_NAMESPACE=namespace,
        LEASEHOLD_WORKER_THREADS="2",
        RUST_LOG=os.environ.get("TEST_LOG", "warn"),
    )
    full_env.pop("LEASEHOLD_REDIS_URL", None)
    if redis is not None:
        full_env["LEASEHOLD_REDIS_URL"] = redis.url
    full_env.update(env)
    log = Path(tempfile.mkstemp(prefix="leasehold-", suffix=".log")[1])
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(binary), "serve"], env=full_env, stdout=out, stderr=subprocess.STDOUT
        )
    scheme = "https" if "LEASEHOLD_TLS_CERT_FILE" in env else "http"
    service = Service(f"{scheme}://127.0.0.1:{port}", proc, namespace, redis, log)

    def ready() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"leasehold exited with {proc.returncode}: {log.read_text()}")
        try:
            verify = ssl.create_default_context(cafile=ca_file) if ca_file else True
            answer = httpx.get(f"{service.url}/readyz", timeout=0.5, verify=verify)
            return answer.status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(ready, 20, "leasehold")
    except BaseException:
        service.stop()
        raise
    return service


# -- the proxy ---------------------------------------------------------------------------


def _read_head(sock: socket.socket, buf: bytearray) -> Optional[bytes]:
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buf += chunk
    end = buf.index(b"\r\n\r\n") + 4
    head = bytes(buf[:end])
    del buf[:end]
    return head


def _header(head: bytes, name: str) -> Optional[str]:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name.lower().encode():
            return value.strip().decode("latin-1")
    return None


def _read_exact(sock: socket.socket, buf: bytearray, n: int) -> bytes:
    while len(buf) < n:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed mid-body")
        buf += chunk
    out = bytes(buf[:n])
    del buf[:n]
    return out


@dataclass
class SeenRequest:
    method: str
    path: str
    owner_token: Optional[str]
    operation_id: Optional[str]
    last_event_id: Optional[str] = None
    dropped: bool = False
    stalled: bool = False


class Proxy:
    """Between a client and the service: relays HTTP/1.1 exchanges one at a time per
    connection (responses streamed, so event streams pass), records every request, and
    can drop the reply to the next N requests of a method (the request reaches the
    service and is answered; the client's connection is closed instead of relaying the
    answer), or cut every open connection."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = int(self._listener.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.seen: list[SeenRequest] = []
        self._drop: dict[str, int] = {}
        self._every: dict[str, int] = {}
        self._stall: dict[str, int] = {}
        self._closing = threading.Event()
        self._count: dict[str, int] = {}
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def drop_replies(self, method: str, times: int) -> None:
        with self._lock:
            self._drop[method] = self._drop.get(method, 0) + times

    def stall_replies(self, method: str, times: int) -> None:
        """The next ``times`` requests of ``method`` reach the service, and their
        answers are held back (the connection stays open, silent) until ``close``."""
        with self._lock:
            self._stall[method] = self._stall.get(method, 0) + times

    def drop_every(self, method: str, n: int) -> None:
        """From now on, drop the reply to every ``n``-th request of ``method``."""
        with self._lock:
            self._every[method] = n

    def cut(self) -> None:
        with self._lock:
            socks = list(self._open)
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        self._closed = True
        self._closing.set()
        self._listener.close()
        self.cut()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        except OSError:
            client.close()
            return
        with self._lock:
            self._open.update((client, upstream))
        cbuf, ubuf = bytearray(), bytearray()
        try:
            while True:
                head = _read_head(client, cbuf)
                if head is None:
                    return
                method, path = head.split(b" ", 2)[:2]
                length = int(_header(head, "content-length") or 0)
                body = _read_exact(client, cbuf, length)
                seen = SeenRequest(
                    method.decode(),
                    path.decode(),
                    _header(head, "lease-owner-token"),
                    _header(head, "lease-operation-id"),
                    _header(head, "last-event-id"),
                )
                with self._lock:
                    count = self._count[seen.method] = self._count.get(seen.method, 0) + 1
                    every = self._every.get(seen.method)
                    if self._drop.get(seen.method, 0) > 0:
                        self._drop[seen.method] -= 1
                        seen.dropped = True
                    elif every and count % every == 0:
                        seen.dropped = True
                    elif self._stall.get(seen.method, 0) > 0:
                        self._stall[seen.method] -= 1
                        seen.stalled = True
                    self.seen.append(seen)
                upstream.sendall(head + body)
                relay = None if seen.dropped or seen.stalled else client
                if not self._response(upstream, ubuf, relay):
                    return
                if seen.dropped:
                    return  # the answer came and went nowhere: cut the client off
                if seen.stalled:
                    self._closing.wait()  # silent until the proxy closes
                    return
        except OSError:
            return
        finally:
            with self._lock:
                self._open.discard(client)
                self._open.discard(upstream)
            client.close()
            upstream.close()

    def _response(
        self, upstream: socket.socket, buf: bytearray, client: Optional[socket.socket]
    ) -> bool:
        """Reads one response (relaying it when ``client``); False when the connection
        must close afterwards."""

        def send(data: bytes) -> None:
            if client is not None:
                client.sendall(data)

        head = _read_head(upstream, buf)
        if head is None:
            return False
        send(head)
        length = _header(head, "content-length")
        if length is not None:
            send(_read_exact(upstream, buf, int(length)))
        elif (_header(head, "transfer-encoding") or "").lower() == "chunked":
            while True:
                while b"\r\n" not in buf:
                    chunk = upstream.recv(65536)
                    if not chunk:
                        return False
                    buf += chunk
                line_end = buf.index(b"\r\n") + 2
                size = int(bytes(buf[: line_end - 2]).split(b";")[0], 16)
                send(_read_exact(upstream, buf, line_end))
                send(_read_exact(upstream, buf, size + 2))
                if size == 0:
                    break
        return (_header(head, "connection") or "").lower() != "close"

    def acquires(self) -> list[SeenRequest]:
        with self._lock:
            return [r for r in self.seen if r.method == "PUT" and r.path.startswith("/leases/")]


# -- PostgreSQL --------------------------------------------------------------------------


@dataclass
class Postgres:
    dir: Path
    port: int
    run_as: Optional[str]

    @property
    def conninfo(self) -> str:
        return f"host={self.dir} port={self.port} user=postgres dbname=postgres"

    def _cmd(self, *args: str) -> list[str]:
        prefix = ["runuser", "-u", self.run_as, "--"] if self.run_as else []
        return [*prefix, *args]

    def stop(self) -> None:
        subprocess.run(
            self._cmd(
                str(PG_BIN / "pg_ctl"), "-D", str(self.dir / "data"), "-m", "immediate", "stop"
            ),
            capture_output=True,
            timeout=30,
        )
        shutil.rmtree(self.dir, ignore_errors=True)


def start_postgres() -> Postgres:
    if not (PG_BIN / "initdb").exists():
        raise MissingPart(
            f"PostgreSQL is not installed at {PG_BIN} (apt-get install postgresql, or set "
            "LEASEHOLD_PG_BIN to its bin directory)"
        )
    run_as = "postgres" if os.geteuid() == 0 else None
    base = Path(tempfile.mkdtemp(prefix="leasehold-pg-"))
    if run_as:
        shutil.chown(base, user=run_as)
    port = free_port()
    pg = Postgres(base, port, run_as)
    subprocess.run(
        pg._cmd(
            str(PG_BIN / "initdb"), "-D", str(base / "data"), "-U", "postgres", "--auth=trust", "-N"
        ),
        check=True,
        capture_output=True,
        timeout=120,
    )
    subprocess.run(
        pg._cmd(
            str(PG_BIN / "pg_ctl"),
            "-D",
            str(base / "data"),
            "-l",
            str(base / "log"),
            "-w",
            "-o",
            f"-p {port} -k {base} -c listen_addresses='' -c fsync=off",
            "start",
        ),
        check=True,
        capture_output=True,
        timeout=60,
    )
    return pg
