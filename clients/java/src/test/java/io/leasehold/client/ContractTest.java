package io.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.leasehold.client.Outcomes.AcquireOutcome;
import io.leasehold.client.Outcomes.Acquired;
import io.leasehold.client.Outcomes.AlreadyAbsent;
import io.leasehold.client.Outcomes.Contended;
import io.leasehold.client.Outcomes.Lost;
import io.leasehold.client.Outcomes.Released;
import io.leasehold.client.Outcomes.Renewed;
import io.leasehold.client.Outcomes.Replayed;
import io.leasehold.client.Records.Inspection;
import io.leasehold.client.Records.Leader;
import io.leasehold.client.Records.WatchEvent;
import java.time.Duration;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** The verbs, the handle and the lock against the real service (embedded store). */
class ContractTest {
    static final String P = "java-contract";
    static Harness.Service service;
    static LeaseholdClient client;

    @BeforeAll
    static void start() {
        service = new Harness.Service(null);
        client = LeaseholdClient.builder(service.url).build();
        // Class loading in a cold JVM would eat the short leases' validity (counted from the send).
        for (int i = 0; i < 3; i++) {
            client.inspect(P, fresh(), null);
            client.inspectAsync(P, fresh(), null).join();
        }
    }

    @AfterAll
    static void stop() {
        service.close();
    }

    static String fresh() {
        return Names.digest("res-" + UUID.randomUUID());
    }

    static Lease hold(String digest, Attempt attempt, Duration ttl) {
        AcquireOutcome o = client.acquire(P, digest, attempt, AcquireOptions.ttl(ttl));
        return assertInstanceOf(Acquired.class, o).lease();
    }

    @Test
    void acquireRenewReleaseAndTheHandlesStates() {
        String d = fresh();
        long before = System.nanoTime();
        Lease lease = hold(d, Attempt.generate("op-1"), Duration.ofSeconds(5));
        long answered = System.nanoTime();
        assertTrue(lease.fencingToken() > 0);
        // min(ttl, remainingMs) - drift from the send: between the call and its answer.
        assertTrue(lease.validUntilNanos() <= answered + Duration.ofMillis(5000 - 50).toNanos(),
                "validity counts from the send, less the drift (50 ms for 5 s)");
        assertTrue(lease.validUntilNanos() >= before + Duration.ofMillis(4000).toNanos());
        assertEquals(Duration.ofMillis(50), lease.drift());
        Renewed r = assertInstanceOf(Renewed.class, lease.renew());
        assertEquals(lease.fencingToken(), r.record().fencingToken());
        Contended c = assertInstanceOf(Contended.class,
                client.acquire(P, d, Attempt.generate("op-2"), AcquireOptions.ttl(Duration.ofSeconds(1))));
        assertTrue(c.retryAfterMs() > 0);
        assertInstanceOf(Released.class, lease.release());
        assertEquals(LeaseState.RELEASED, lease.state());
        RefusedException refused = assertThrows(RefusedException.class, lease::renew, "refused locally");
        assertEquals(LeaseState.RELEASED, refused.state());
        assertThrows(RefusedException.class, lease::release);
        assertInstanceOf(AlreadyAbsent.class, client.release(P, d, lease.attempt()), "releasing twice is fine");
    }

    @Test
    void theSameAttemptAgainIsAReplayWithTheSameToken() {
        String d = fresh();
        Attempt a = Attempt.generate("op-replay");
        Lease first = hold(d, a, Duration.ofSeconds(5));
        Replayed again = assertInstanceOf(Replayed.class, client.acquire(P, d, a, AcquireOptions.ttl(Duration.ofSeconds(5))));
        assertEquals(first.fencingToken(), again.record().fencingToken());
        again.lease().release();
    }

    @Test
    void aLeaseTakenOverAnswersLostAndTheHandleEndsLost() throws Exception {
        String d = fresh();
        Lease lease = hold(d, Attempt.generate("op-a"), Duration.ofMillis(200));
        CountDownLatch signalled = new CountDownLatch(1);
        lease.onLost(l -> signalled.countDown());
        // Another attempt takes it once the store has expired it (waiting server-side for it).
        AcquireOutcome other = client.acquire(P, d, Attempt.generate("op-b"),
                AcquireOptions.ttl(Duration.ofSeconds(5)).withWait(Duration.ofSeconds(5)));
        Lease next = assertInstanceOf(Acquired.class, other).lease();
        assertTrue(next.fencingToken() > lease.fencingToken(), "fencing tokens grow");
        assertEquals(LeaseState.LOST, lease.state(), "past its validity the handle is LOST by itself");
        assertTrue(lease.expiredLocally());
        assertTrue(signalled.await(1, TimeUnit.SECONDS));
        assertInstanceOf(Lost.class, client.renew(P, d, lease.attempt(), Duration.ofSeconds(1), null));
        next.release();
    }

    @Test
    void asyncVariantsAnswerTheSame() throws Exception {
        String d = fresh();
        Acquired a = assertInstanceOf(Acquired.class, client.acquireAsync(P, d, Attempt.generate("op-async"),
                AcquireOptions.ttl(Duration.ofSeconds(5)).withHolder("java-test")).get(5, TimeUnit.SECONDS));
        assertEquals("java-test", a.record().holder());
        Inspection seen = client.inspectAsync(P, d, a.lease().attempt()).get(5, TimeUnit.SECONDS);
        assertTrue(seen.held());
        assertEquals("caller", seen.heldBy());
        assertInstanceOf(Renewed.class, a.lease().renewAsync("java-test-2").get(5, TimeUnit.SECONDS));
        assertEquals("java-test-2", client.inspect(P, d, null).holder());
        assertInstanceOf(Released.class, a.lease().releaseAsync().get(5, TimeUnit.SECONDS));
        assertEquals(LeaseState.RELEASED, a.lease().state());
    }

    @Test
    void aLongPollAnswersOnChange() throws Exception {
        String d = fresh();
        Inspection before = client.inspect(P, d, null);
        assertFalse(before.held());
        CompletableFuture<Inspection> changed = client.inspectChangedAsync(P, d, before.version(), Duration.ofSeconds(10));
        Lease lease = hold(d, Attempt.generate("op-poll"), Duration.ofSeconds(5));
        Inspection after = changed.get(5, TimeUnit.SECONDS);
        assertTrue(after.held());
        assertEquals(lease.fencingToken(), after.fencingToken());
        lease.release();
    }

    @Test
    void aWatchSeesChangesAndResumesFromItsLastEventId() throws Exception {
        String d = fresh();
        String lastId;
        try (Watch w = client.watch(P, d, null)) {
            WatchEvent first = w.next();
            assertEquals("state", first.event());
            assertFalse(first.state().held());
            Lease lease = hold(d, Attempt.generate("op-watch"), Duration.ofSeconds(5));
            WatchEvent acquired = w.next();
            assertEquals("acquired", acquired.event());
            assertEquals(lease.fencingToken(), acquired.state().fencingToken());
            lease.release();
            WatchEvent released = w.next();
            assertEquals("released", released.event());
            lastId = w.lastEventId();
            assertEquals(released.id(), lastId);
        }
        Lease again = hold(d, Attempt.generate("op-watch-2"), Duration.ofSeconds(5));
        try (Watch w = client.watch(P, d, lastId)) {
            WatchEvent resumed = w.next();
            assertEquals("state", resumed.event(), "something changed since the last id: a state event");
            assertTrue(resumed.state().held());
            assertEquals(again.fencingToken(), resumed.state().fencingToken());
        }
        again.release();
    }

    @Test
    void closingAWatchUnblocksItsReader() throws Exception {
        Watch w = client.watch(P, fresh(), null);
        assertEquals("state", w.next().event());
        CompletableFuture<WatchEvent> next = CompletableFuture.supplyAsync(w::next);
        w.close();
        assertEquals(null, next.get(5, TimeUnit.SECONDS));
    }

    @Test
    void withLockRunsTheWorkAndReleases() throws Exception {
        String d = fresh();
        long token = client.withLock(P, d, LockOptions.ttl(Duration.ofSeconds(5)), () -> {
            Inspection seen = client.inspect(P, d, null);
            assertTrue(seen.held());
            return seen.fencingToken();
        });
        assertTrue(token > 0);
        assertFalse(client.inspect(P, d, null).held(), "released on the way out");
    }

    @Test
    void aLockThatCannotGetItSaysWhy() {
        String d = fresh();
        Lease holder = hold(d, Attempt.generate("op-holder"), Duration.ofSeconds(5));
        NotAcquiredException e = assertThrows(NotAcquiredException.class,
                () -> client.lock(P, d, LockOptions.ttl(Duration.ofSeconds(1)).withWait(Duration.ofMillis(100))));
        assertInstanceOf(Contended.class, e.outcome());
        holder.release();
    }

    @Test
    void theKeeperRenewsPastTheTtl() throws Exception {
        String d = fresh();
        try (LockHandle lock = client.lock(P, d, LockOptions.ttl(Duration.ofSeconds(1)))) {
            long firstEnd = lock.lease().validUntilNanos();
            // Until the validity has moved past the first TTL's end by half a TTL (renewals
            // landed), bounded.
            Harness.waitUntil(() -> lock.lease().validUntilNanos() > firstEnd + Duration.ofMillis(500).toNanos(),
                    Duration.ofSeconds(5), "renewals");
            assertTrue(lock.lease().isValid());
            assertFalse(lock.lost());
        }
    }

    @Test
    void theServiceUnreachableIsUnavailableNotIndeterminate() {
        LeaseholdClient nowhere = LeaseholdClient.builder("http://127.0.0.1:" + Harness.freePort()).build();
        UnavailableException e = assertThrows(UnavailableException.class,
                () -> nowhere.acquire(P, fresh(), Attempt.generate("op-x"), AcquireOptions.ttl(Duration.ofSeconds(1))));
        assertEquals("connect", e.why());
    }

    @Test
    void badInputIsARejectionNamingTheField() {
        InvalidRequestException e = assertThrows(InvalidRequestException.class, () -> client.acquire(P, fresh(),
                Attempt.generate("op-bad"), AcquireOptions.ttl(Duration.ofHours(2))));
        assertTrue(e.errors().stream().anyMatch(f -> f.field().contains("ttlMs")), e.errors().toString());
    }

    @Test
    void anObserverHearsEveryNewLeader() throws Exception {
        String d = fresh();
        List<Leader> seen = new CopyOnWriteArrayList<>();
        CountDownLatch proclaimed = new CountDownLatch(1);
        Election watcher = new Election(client, P, d, "watcher", Election.Options.ttl(Duration.ofSeconds(2))
                .withWait(Duration.ofSeconds(2)), new Election.Listener() {
                    @Override
                    public void newLeader(Leader leader) {
                        seen.add(leader);
                        if ("watcher-2".equals(leader.holder())) {
                            proclaimed.countDown();
                        }
                    }
                });
        CompletableFuture<Void> campaign = watcher.start();
        Harness.waitUntil(watcher::isLeader, Duration.ofSeconds(5), "the watcher leads");
        watcher.proclaim("watcher-2");
        assertTrue(proclaimed.await(5, TimeUnit.SECONDS), "leaders seen: " + seen);
        assertTrue(seen.stream().anyMatch(l -> "watcher".equals(l.holder())), "leaders seen: " + seen);
        assertEquals("watcher-2", seen.get(seen.size() - 1).holder());
        assertNotNull(seen.get(seen.size() - 1).fencingToken());
        watcher.resign();
        campaign.get(5, TimeUnit.SECONDS);
        assertFalse(client.inspect(P, d, null).held(), "resigning releases");
    }
}
