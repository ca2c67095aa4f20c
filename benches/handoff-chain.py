#!/usr/bin/env python3
"""Where a fair hand-off's time goes, hop by hop, read off the wire.

Runs one round of the load benchmark's `fair` scenario (8 contenders, half
on each of two instances of one Redis), records the loopback traffic with
`tcpdump` for 3 s of it, and follows each hand-off through the packets:

    the release's EVALSHA sent to Redis
      -> Redis's wake-up message reaching the next holder's instance
      -> that instance's acquire EVALSHA (a hand-off to the other instance)
      -> Redis's reply
      -> that instance's `acquired` HTTP answer
    against the releasing instance's `released` HTTP answer.

Times are when the packets crossed loopback, so they leave out the bench
client's own reading. tcpdump itself takes CPU on a small machine: read the
hops against each other (and builds against each other, one run each, in
the same conditions), not as absolute latencies.

    python3 benches/handoff-chain.py --bench target/release/deps/load-<hash> \\
        --leasehold target/release/leasehold [--baseline-too OLD_BINARY]

Needs tcpdump and ss (Debian: apt-get install tcpdump iproute2) and root
for the capture.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HEADER = re.compile(
    r"^(\d+\.\d+) IP 127\.0\.0\.1\.(\d+) > 127\.0\.0\.1\.(\d+): .* length (\d+)"
)


@dataclass
class Event:
    at: float
    kind: str  # delete, evalsha, pub, reply, http-acquired, http-released
    instance: int  # pid of the leasehold process on our side of it


def pids_of(binary: str) -> list[int]:
    """Processes whose command line starts with `binary`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmdline and cmdline[0].decode(errors="replace") == binary:
            found.append(int(entry.name))
    return found


def ports_of(pids: list[int]) -> dict[int, int]:
    """Local TCP port -> pid, for the sockets of `pids`."""
    out = subprocess.run(
        ["ss", "-tanpH"], capture_output=True, text=True, check=True
    ).stdout
    ports: dict[int, int] = {}
    for line in out.splitlines():
        m = re.search(r"pid=(\d+)", line)
        if not m or int(m.group(1)) not in pids:
            continue
        local = line.split()[3]
        ports[int(local.rsplit(":", 1)[1])] = int(m.group(1))
    return ports


def capture(bench: str, leasehold: str, pcap: Path) -> tuple[dict[int, int], str]:
    """One `fair` round of `leasehold`, 3 s of it recorded to `pcap`."""
    env = dict(os.environ, LOAD_LEASEHOLD_BIN=leasehold)
    env.pop("LOAD_BASELINE_BIN", None)
    run = subprocess.Popen(
        [bench, "--bench", "--only", "fair", "--duration", "3", "--rounds", "1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 60
    while len(pids_of(leasehold)) < 2:
        if time.monotonic() > deadline or run.poll() is not None:
            run.kill()
            sys.exit("the bench did not start two instances of " + leasehold)
        time.sleep(0.05)
    time.sleep(1.5)  # into the phase, past its warm-up
    ports = ports_of(pids_of(leasehold))
    subprocess.run(
        [
            "timeout",
            "3",
            "tcpdump",
            "-i",
            "lo",
            "-nn",
            "-s",
            "300",
            "-w",
            str(pcap),
            "tcp and greater 60",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    summary, _ = run.communicate()
    return ports, summary


def events(pcap: Path, ports: dict[int, int]) -> list[Event]:
    text = subprocess.run(
        ["tcpdump", "-r", str(pcap), "-nn", "-tt", "-A"],
        capture_output=True,
        text=True,
        errors="replace",
        check=True,
    ).stdout
    packets: list[tuple[float, int, int, int, list[str]]] = []
    for line in text.splitlines():
        m = HEADER.match(line)
        if m:
            at, src, dst, length = m.groups()
            packets.append((float(at), int(src), int(dst), int(length), []))
        elif packets:
            packets[-1][4].append(line)
    # Redis's port: where the instances send their scripts.
    redis = next(
        (
            dst
            for _, src, dst, _, lines in packets
            if src in ports and "EVALSHA" in "\n".join(lines)
        ),
        None,
    )
    found: list[Event] = []
    for at, src, dst, length, lines in packets:
        if length == 0:
            continue
        body = "\n".join(lines)
        if src == redis and dst in ports and "message" in body and ":wake:" in body:
            found.append(Event(at, "pub", ports[dst]))
        elif src == redis and dst in ports:
            found.append(Event(at, "reply", ports[dst]))
        elif src in ports and "EVALSHA" in body:
            found.append(Event(at, "evalsha", ports[src]))
        elif src in ports and "HTTP/1.1 2" in body:
            if '"acquired"' in body:
                found.append(Event(at, "http-acquired", ports[src]))
            elif '"released"' in body:
                found.append(Event(at, "http-released", ports[src]))
        elif dst in ports and src not in ports and "DELETE /leases/" in body:
            found.append(Event(at, "delete", ports[dst]))
    found.sort(key=lambda e: e.at)
    return found


def first(evs: list[Event], kind: str, instance: int, after: float) -> float | None:
    for e in evs:
        if e.kind == kind and e.instance == instance and e.at > after:
            return e.at
    return None


def hops(evs: list[Event]) -> dict[str, list[float]]:
    """Per hop, the µs of each hand-off seen whole."""
    out: dict[str, list[float]] = {}

    def add(name: str, a: float | None, b: float | None) -> None:
        if a is not None and b is not None:
            out.setdefault(name, []).append((b - a) * 1e6)

    for i, e in enumerate(evs):
        if e.kind != "http-released":
            continue
        nxt = next(
            (j for j in range(i + 1, len(evs)) if evs[j].kind == "http-acquired"), None
        )
        if nxt is None:
            break
        got = evs[nxt]
        kind = "other" if got.instance != e.instance else "same"
        window = evs[max(0, i - 30) : nxt + 1]
        # The release's script: the instance's first after the DELETE it
        # answered (other waiters of that instance may send looks too).
        asked = [
            w.at
            for w in window
            if w.kind == "delete" and w.instance == e.instance and w.at < e.at
        ]
        release = first(window, "evalsha", e.instance, asked[-1]) if asked else None
        if release is not None and release > e.at:
            release = None
        add(f"{kind}: hand-off (released answer -> acquired answer)", e.at, got.at)
        add(f"{kind}: release EVALSHA -> released answer", release, e.at)
        add(
            f"{kind}: release EVALSHA -> Redis's reply to it",
            release,
            first(window, "reply", e.instance, release) if release else None,
        )
        woken = first(window, "pub", got.instance, release) if release else None
        add(
            f"{kind}: release EVALSHA -> wake-up at the next holder's instance",
            release,
            woken,
        )
        if kind == "same":
            add("same: wake-up -> acquired answer", woken, got.at)
            continue
        acquire = first(window, "evalsha", got.instance, woken) if woken else None
        reply = first(window, "reply", got.instance, acquire) if acquire else None
        add("other: wake-up -> its acquire EVALSHA", woken, acquire)
        add("other: acquire EVALSHA -> Redis's reply", acquire, reply)
        add("other: Redis's reply -> acquired answer", reply, got.at)
    return out


def report(name: str, table: dict[str, list[float]]) -> None:
    print(f"\n{name}\n")
    print("| hop | n | p25 µs | p50 µs | p75 µs |\n|---|---|---|---|---|")
    for hop in sorted(table):
        v = sorted(table[hop])
        q = statistics.quantiles(v, n=4) if len(v) > 1 else [v[0]] * 3
        print(f"| {hop} | {len(v)} | {q[0]:.0f} | {q[1]:.0f} | {q[2]:.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", required=True, help="the load benchmark's binary")
    ap.add_argument("--leasehold", required=True, help="the service binary to measure")
    ap.add_argument("--baseline-too", help="another service binary, measured after it")
    args = ap.parse_args()
    for tool in ("tcpdump", "ss"):
        if (
            subprocess.run(["which", tool], check=False, capture_output=True).returncode
            != 0
        ):
            sys.exit(f"{tool} not found: apt-get install tcpdump iproute2")
    builds = [args.leasehold] + ([args.baseline_too] if args.baseline_too else [])
    with tempfile.TemporaryDirectory() as tmp:
        for n, binary in enumerate(builds):
            binary = os.path.abspath(binary)
            pcap = Path(tmp) / f"fair{n}.pcap"
            ports, summary = capture(args.bench, binary, pcap)
            line = next((x for x in summary.splitlines() if "hand-off p50 ≤" in x), "")
            report(
                f"{binary}\n\nthe bench's own line: {line.strip()}",
                hops(events(pcap, ports)),
            )


if __name__ == "__main__":
    main()
