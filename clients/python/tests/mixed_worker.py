"""A worker of the mixed checked history (tests/mixed_history.rs at the repository root):
Python threads that take turns on shared resources with ``Client.lock`` and write, as JSON
lines, when each believed it held a lease. The Rust test runs it beside TypeScript and Rust
workers, injects the faults, and judges every belief together.

Usage::

    mixed_worker.py OUT DURATION_MS TTL_MS NAME URL[,URL...] RAW_ID[,RAW_ID...] [TASKS]

Each of TASKS threads (default 2), named ``NAME-<i>``, runs rounds until DURATION_MS have
passed: round ``r`` locks ``RAW_ID[(i + r // 3) % n]`` through ``URL[(i + r) % m]`` (purpose
``mixed``), works for a while (sometimes longer than the TTL: the keeper renews), stopping
early when ``lease.lost`` is set, and writes one line per belief::

    {"kind": "belief", "lang": "python", "worker": ..., "resource": RAW_ID, "url": URL,
     "token": fencing token, "sentMs": when lock() was called, "startMs": when the body
     began, "endMs": min(the loss signal, the body's end, before the release), "how":
     "acquired" | "replayed_same_operation", "ended": "released" | "lost" | "unknown" |
     "expiring"}

and, when the thread is done, one ``{"kind": "summary", ...}`` line with its counts. Times are
wall-clock milliseconds (``time.time()``), the clock the other languages' workers use too.
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
from contextlib import ExitStack
from typing import Any, Callable

from leasehold import Client, LeaseBase, LeaseholdError, NotAcquired

PURPOSE = "mixed"


def now_ms() -> float:
    return time.time() * 1000.0


class Out:
    """One JSON line per record, flushed at once, from any thread."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "w", encoding="utf-8")  # noqa: SIM115 (closed in close())
        self._lock = threading.Lock()

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, separators=(",", ":"))
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        self._file.close()


def stamp(sink: list[float]) -> Callable[[LeaseBase], None]:
    """An on_lost callback recording when it was called."""
    return lambda _: sink.append(now_ms())


def task(
    out: Out, worker: str, index: int, stop_at: float, ttl: float, urls: list[str], ids: list[str]
) -> None:
    rng = random.Random(worker)
    counts: dict[str, int] = {}
    rounds = beliefs = 0

    def count(what: str) -> None:
        counts[what] = counts.get(what, 0) + 1

    with ExitStack() as stack:
        clients = [stack.enter_context(Client(url, timeout=2.0)) for url in urls]
        while now_ms() < stop_at:
            rounds += 1
            url_index = (index + rounds) % len(urls)
            raw_id = ids[(index + rounds // 3) % len(ids)]
            lost_at: list[float] = []
            sent = now_ms()
            ctx = clients[url_index].lock(
                PURPOSE, raw_id, ttl=ttl, wait=ttl / 2, retry_budget=2.0, on_lost=stamp(lost_at)
            )
            try:
                with ctx as lease:
                    start = now_ms()
                    # The work: up to 1.5 TTL (the keeper renews), stopping when told.
                    lease.lost.wait(rng.uniform(0.05, 1.5 * ttl))
                    body_end = now_ms()
                    end = min([body_end, *lost_at])
                    ended = "released"
                    if lost_at:
                        state = lease.state.value
                        ended = state if state in ("lost", "unknown") else "expiring"
                    out.write(
                        {
                            "kind": "belief",
                            "lang": "python",
                            "worker": worker,
                            "resource": raw_id,
                            "url": urls[url_index],
                            "token": lease.fencing_token,
                            "sentMs": sent,
                            "startMs": start,
                            "endMs": end,
                            "how": ctx.outcome,
                            "ended": ended,
                        }
                    )
                    beliefs += 1
                    count(f"held via {ctx.outcome}")
                    count(f"ended {ended}")
            except NotAcquired as e:
                count(f"not acquired: {e.outcome.outcome}")
            except LeaseholdError as e:
                count(f"lock failed: {type(e).__name__}")
    out.write(
        {
            "kind": "summary",
            "lang": "python",
            "worker": worker,
            "rounds": rounds,
            "beliefs": beliefs,
            "counts": counts,
        }
    )


def main(argv: list[str]) -> int:
    if len(argv) not in (6, 7):
        print(__doc__, file=sys.stderr)
        return 2
    path, duration_ms, ttl_ms, name, urls, ids = argv[:6]
    tasks = int(argv[6]) if len(argv) == 7 else 2
    stop_at = now_ms() + float(duration_ms)
    ttl = float(ttl_ms) / 1000.0
    out = Out(path)
    threads = [
        threading.Thread(
            target=task,
            args=(out, f"{name}-{i}", i, stop_at, ttl, urls.split(","), ids.split(",")),
        )
        for i in range(tasks)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
