from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from harness import Redis, Service, start_redis, start_service
from leasehold import AsyncClient, Client


@pytest.fixture(scope="session")
def redis() -> Iterator[Redis]:
    r = start_redis()
    yield r
    r.stop()


@pytest.fixture(scope="session")
def memory_service() -> Iterator[Service]:
    s = start_service()
    yield s
    s.stop()


@pytest.fixture(scope="session")
def redis_service(redis: Redis) -> Iterator[Service]:
    s = start_service(redis)
    yield s
    s.stop()


@pytest.fixture(params=["memory", "redis"])
def service(request: pytest.FixtureRequest) -> Service:
    """The same contract on every store."""
    name = "memory_service" if request.param == "memory" else "redis_service"
    s: Service = request.getfixturevalue(name)
    return s


@pytest.fixture
def client(service: Service) -> Iterator[Client]:
    with Client(service.url) as c:
        yield c


@pytest.fixture
async def aclient(service: Service) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(service.url) as c:
        yield c


@pytest.fixture
def raw_id() -> str:
    """A fresh resource per test: tests never share a lease."""
    return "res-" + uuid.uuid4().hex


@pytest.fixture
def redis_service_fresh() -> Iterator[Service]:
    """A service on its own redis-server, for tests that freeze or break Redis."""
    r = start_redis()
    try:
        s = start_service(r)
        try:
            yield s
        finally:
            s.stop()
    finally:
        r.stop()
