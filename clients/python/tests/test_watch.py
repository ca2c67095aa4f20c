"""``watch()``: the SSE stream, parsed here, resumed with ``Last-Event-ID`` after a cut."""

from __future__ import annotations

from harness import Proxy, Service
from leasehold import Acquired, AsyncClient, Client
from leasehold._sse import SseParser

P = "py-watch"


def test_sse_parser_rules() -> None:
    parser = SseParser()
    lines = [
        ": keepalive",
        "event: state",
        "id: 1.1",
        'data: {"a":',
        "data:1}",
        "retry: 10",
        "",
        "",
        "data: x",
        "",
    ]
    out = [e for e in (parser.feed(line) for line in lines) if e is not None]
    assert [(e.event, e.id, e.data) for e in out] == [
        ("state", "1.1", '{"a":\n1}'),
        ("message", "1.1", "x"),
    ]


def test_watch_follows_every_change(client: Client, raw_id: str) -> None:
    stream = client.watch(P, raw_id)
    first = next(stream)
    assert first.event == "state" and not first.state.held
    attempt = client.attempt()
    got = client.acquire(P, raw_id, attempt=attempt, ttl=30, holder="w-1")
    assert isinstance(got, Acquired)
    event = next(stream)
    assert event.event == "acquired" and event.state.fencing_token == got.lease.fencing_token
    assert event.id == event.state.version
    got.handle.renew(holder="w-2")
    event = next(stream)
    assert event.event == "holder_changed" and event.state.holder == "w-2"
    got.handle.release()
    event = next(stream)
    assert event.event == "released" and not event.state.held
    stream.close()


def test_watch_resumes_after_a_cut(service: Service, raw_id: str) -> None:
    proxy = Proxy(int(service.url.rsplit(":", 1)[1]))
    try:
        with Client(proxy.url) as watcher, Client(service.url) as actor:
            stream = watcher.watch(P, raw_id, retry_period=0.05)
            first = next(stream)
            assert first.event == "state"
            proxy.cut()
            got = actor.acquire(P, raw_id, attempt=actor.attempt(), ttl=30)
            assert isinstance(got, Acquired)
            event = next(stream)
            # Resumed from the last id: only the change comes, as a state event.
            assert event.state.held and event.state.fencing_token == got.lease.fencing_token
            gets = [r for r in proxy.seen if r.path.endswith("/events")]
            assert len(gets) == 2
            assert gets[0].last_event_id is None and gets[1].last_event_id == first.id
            stream.close()
    finally:
        proxy.close()


async def test_async_watch(aclient: AsyncClient, raw_id: str) -> None:
    stream = aclient.watch(P, raw_id)
    first = await stream.__anext__()
    assert first.event == "state"
    attempt = await aclient.attempt()
    got = await aclient.acquire(P, raw_id, attempt=attempt, ttl=0.3)
    assert isinstance(got, Acquired)
    event = await stream.__anext__()
    assert event.event == "acquired"
    event = await stream.__anext__()  # nobody renews: it runs out
    assert event.event == "expired" and not event.state.held
    await stream.aclose()
