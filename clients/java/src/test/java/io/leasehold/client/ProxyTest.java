package io.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.leasehold.client.Outcomes.Acquired;
import io.leasehold.client.Records.WatchEvent;
import java.time.Duration;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** Lost replies and cut streams between the client and the real service (embedded store). */
class ProxyTest {
    static final String P = "java-proxy";
    static Harness.Service service;

    @BeforeAll
    static void start() {
        service = new Harness.Service(null);
    }

    @AfterAll
    static void stop() {
        service.close();
    }

    @Test
    void aRenewWhoseReplyIsLostMakesTheHandleUnknown() throws Exception {
        try (Harness.Proxy proxy = new Harness.Proxy(service.port)) {
            LeaseholdClient client = LeaseholdClient.builder(proxy.url).build();
            String d = Names.digest("res-" + UUID.randomUUID());
            Lease lease = assertInstanceOf(Acquired.class, client.acquire(P, d, Attempt.generate("op-u"),
                    AcquireOptions.ttl(Duration.ofSeconds(10)))).lease();
            CountDownLatch signalled = new CountDownLatch(1);
            lease.onLost(l -> signalled.countDown());
            proxy.dropReplies("PATCH", 1);
            IndeterminateException e = assertThrows(IndeterminateException.class, lease::renew);
            assertEquals("connection_lost", e.why());
            assertEquals(LeaseState.UNKNOWN, lease.state(), "applied or not, the lease is no longer known to be ours");
            assertTrue(signalled.await(1, TimeUnit.SECONDS), "UNKNOWN fires the loss signal");
            assertThrows(RefusedException.class, lease::renew, "and is final");
            lease.release(); // clean-up is still sent from UNKNOWN
            assertEquals(LeaseState.UNKNOWN, lease.state());
        }
    }

    @Test
    void aCutWatchReconnectsWithItsLastEventId() throws Exception {
        try (Harness.Proxy proxy = new Harness.Proxy(service.port)) {
            LeaseholdClient client = LeaseholdClient.builder(proxy.url).build();
            String d = Names.digest("res-" + UUID.randomUUID());
            try (Watch w = client.watch(P, d, null)) {
                WatchEvent first = w.next();
                assertEquals("state", first.event());
                proxy.cut();
                Lease lease = assertInstanceOf(Acquired.class, LeaseholdClient.builder(service.url).build()
                        .acquire(P, d, Attempt.generate("op-w"), AcquireOptions.ttl(Duration.ofSeconds(10)))).lease();
                WatchEvent after = w.next();
                assertTrue(after.state().held(), "the change made while cut arrives: " + after);
                assertEquals(lease.fencingToken(), after.state().fencingToken());
                List<Harness.Seen> streams = proxy.all().stream().filter(s -> s.path().endsWith("/events")).toList();
                assertEquals(2, streams.size(), "one reconnection: " + streams);
                assertEquals(first.id(), streams.get(1).lastEventId(), "resumed from the last id seen");
                lease.release();
            }
        }
    }
}
