package io.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import io.leasehold.client.Election.Term;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.TestFactory;

/**
 * The shared conformance table ({@code clients/conformance/scenarios.json}, DESIGN §15) run against
 * the real service: each {@code fault.kind} maps to a harness, each {@code expect} member to a
 * check. A kind or an expectation this runner does not know fails the test.
 */
class ConformanceTest {
    static final String P = "java-conformance";
    private static Harness.Service memory;
    private static Harness.Redis redis;
    private static Harness.Service onRedis;

    interface Scenario {
        Map<String, Object> run(JsonNode scenario, Harness.Service service) throws Exception;
    }

    static synchronized Harness.Service memory() {
        if (memory == null) {
            memory = new Harness.Service(null);
        }
        return memory;
    }

    static synchronized Harness.Service redisService() {
        if (onRedis == null) {
            redis = new Harness.Redis();
            onRedis = new Harness.Service(redis);
        }
        return onRedis;
    }

    @AfterAll
    static void stop() {
        for (AutoCloseable c : new AutoCloseable[] {memory, onRedis, redis}) {
            if (c != null) {
                try {
                    c.close();
                } catch (Exception e) {
                    // stopping a test part
                }
            }
        }
    }

    static LeaseholdClient client(String url) {
        return LeaseholdClient.builder(url).build();
    }

    static String rawDigest() {
        return Names.digest(UUID.randomUUID().toString());
    }

    static Map<String, Object> dropReply(JsonNode s, Harness.Service service) {
        JsonNode fault = s.get("fault");
        assertEquals("acquire", fault.get("verb").asText());
        try (Harness.Proxy proxy = new Harness.Proxy(service.port)) {
            proxy.dropReplies("PUT", fault.get("times").asInt());
            LeaseholdClient c = client(proxy.url);
            String digest = rawDigest();
            boolean holds;
            String outcome;
            try (LockHandle lock = c.lock(P, digest, LockOptions.ttl(Duration.ofMillis(s.at("/lease/ttlMs").asLong())))) {
                holds = lock.lease().isValid()
                        && "caller".equals(c.inspect(P, digest, lock.attempt()).heldBy());
                outcome = lock.outcome();
            }
            List<Harness.Seen> acquires = proxy.acquires();
            Set<String> attempts = new HashSet<>();
            for (Harness.Seen r : acquires) {
                attempts.add(r.ownerToken() + "/" + r.operationId());
            }
            long created = proxy.all().stream().filter(r -> r.path().equals("/attempts")).count();
            Map<String, Object> o = new LinkedHashMap<>();
            o.put("holds", holds);
            o.put("attemptsCreated", attempts.size() + (int) created);
            o.put("acquireRequests", acquires.size());
            o.put("finalOutcome", outcome);
            o.put("dropped", acquires.stream().filter(Harness.Seen::dropped).count());
            return o;
        }
    }

    /** The protected work: runs until interrupted (the lock's loss signal), at most {@code bound}. */
    static boolean workUntilInterrupted(Duration bound) {
        try {
            Thread.sleep(bound.toMillis());
            return false;
        } catch (InterruptedException e) {
            return true;
        }
    }

    static Map<String, Object> freezeStore(JsonNode s, Harness.Service service) throws Exception {
        JsonNode fault = s.get("fault");
        Duration ttl = Duration.ofMillis(s.at("/lease/ttlMs").asLong());
        AtomicLong signalledAt = new AtomicLong();
        CountDownLatch thawed = new CountDownLatch(1);
        ScheduledExecutorService timer = Executors.newSingleThreadScheduledExecutor();
        LeaseholdClient c = client(service.url);
        Lease lease;
        long validUntil;
        boolean interrupted;
        try (LockHandle lock = c.lock(P, rawDigest(),
                LockOptions.ttl(ttl).withOnLost(l -> signalledAt.compareAndSet(0, System.nanoTime())))) {
            lease = lock.lease();
            Thread.sleep(fault.get("afterMs").asLong()); // the scenario's own timing: the fault comes afterMs in
            service.redis.freeze();
            timer.schedule(() -> {
                service.redis.thaw();
                thawed.countDown();
            }, fault.get("forMs").asLong(), TimeUnit.MILLISECONDS);
            validUntil = lease.validUntilNanos(); // as last extended before the freeze
            interrupted = workUntilInterrupted(ttl.multipliedBy(2));
        } finally {
            assertTrue(thawed.await(30, TimeUnit.SECONDS), "redis thawed");
            timer.shutdown();
        }
        Map<String, Object> o = new LinkedHashMap<>();
        long at = signalledAt.get();
        o.put("state", lease.state().wireName());
        o.put("signalled", at != 0);
        o.put("interrupted", interrupted);
        o.put("signalledBeforeValidityEnds", at != 0 && at - validUntil < 0);
        o.put("signalledMsBeforeValidityEnds", at == 0 ? null : (validUntil - at) / 1e6);
        return o;
    }

    static Map<String, Object> deleteLeaseKey(JsonNode s, Harness.Service service) {
        Duration ttl = Duration.ofMillis(s.at("/lease/ttlMs").asLong());
        String digest = rawDigest();
        AtomicLong signalledAt = new AtomicLong();
        LeaseholdClient c = client(service.url);
        Lease lease;
        boolean interrupted;
        try (LockHandle lock = c.lock(P, digest,
                LockOptions.ttl(ttl).withOnLost(l -> signalledAt.compareAndSet(0, System.nanoTime())))) {
            lease = lock.lease();
            assertEquals("1", service.redis.cli("DEL", service.leaseKey(P, digest)));
            interrupted = workUntilInterrupted(ttl.multipliedBy(2));
        }
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("state", lease.state().wireName());
        o.put("signalled", signalledAt.get() != 0);
        o.put("interrupted", interrupted);
        o.put("reason", lease.lostReason());
        return o;
    }

    record Candidate(Election election, CompletableFuture<Void> campaign, CountDownLatch leading, AtomicLong startedAt) {}

    static Candidate second(LeaseholdClient c, String digest, Duration ttl) {
        CountDownLatch leading = new CountDownLatch(1);
        AtomicLong startedAt = new AtomicLong();
        Election e = new Election(c, P, digest, "second", Election.Options.ttl(ttl).withWait(Duration.ofSeconds(10)),
                new Election.Listener() {
                    @Override
                    public void startedLeading(Term term) {
                        startedAt.compareAndSet(0, System.nanoTime());
                        leading.countDown();
                    }
                });
        return new Candidate(e, e.start(), leading, startedAt);
    }

    /** Until the second candidate's acquire waits server-side (the service's waiters gauge). */
    static void campaigning(Harness.Service service) {
        Harness.waitUntil(() -> service.waiters() >= 1, Duration.ofSeconds(10), "the second candidate's wait");
    }

    static Map<String, Object> killLeaderProcess(JsonNode s, Harness.Service service) throws Exception {
        Duration ttl = Duration.ofMillis(s.at("/lease/ttlMs").asLong());
        String digest = rawDigest();
        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        Process leader = new ProcessBuilder(java, "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp", testClasspath(),
                LeaderProcess.class.getName(), service.url, P,
                digest, Long.toString(ttl.toMillis()), "first").redirectError(ProcessBuilder.Redirect.INHERIT).start();
        try {
            BufferedReader out = new BufferedReader(new InputStreamReader(leader.getInputStream(), StandardCharsets.UTF_8));
            java.util.concurrent.BlockingQueue<String> lines = new java.util.concurrent.LinkedBlockingQueue<>();
            Thread reader = new Thread(() -> {
                try {
                    for (String l = out.readLine(); l != null; l = out.readLine()) {
                        lines.add(l);
                    }
                } catch (java.io.IOException e) {
                    // the process ended
                }
            });
            reader.setDaemon(true);
            reader.start();
            String first = lines.poll(30, TimeUnit.SECONDS);
            assertTrue(first != null && first.startsWith("leading "), "leader process said " + first);
            Candidate cand = second(client(service.url), digest, ttl);
            campaigning(service);
            if (!leader.isAlive() || cand.leading().getCount() == 0) {
                leader.destroyForcibly();
                reader.join(5000);
                fail("the second led while the first still held; the leader process said: " + first + " " + lines);
            }
            leader.destroyForcibly(); // SIGKILL
            long killedAt = System.nanoTime();
            leader.waitFor(10, TimeUnit.SECONDS);
            assertFalse(cand.leading().getCount() == 0 && cand.startedAt().get() - killedAt < 0,
                    "the second led before the kill");
            assertTrue(cand.leading().await(ttl.toMillis() * 3, TimeUnit.MILLISECONDS), "the second never led");
            cand.election().resign();
            cand.campaign().get(10, TimeUnit.SECONDS);
            return new LinkedHashMap<>(Map.of("nextLeaderWithinMs", (cand.startedAt().get() - killedAt) / 1e6));
        } finally {
            leader.destroyForcibly();
        }
    }

    static String testClasspath() {
        String cp = System.getProperty("leasehold.test.classpath");
        return cp != null ? cp : System.getProperty("java.class.path");
    }

    static Map<String, Object> resign(JsonNode s, Harness.Service service) throws Exception {
        Duration ttl = Duration.ofMillis(s.at("/lease/ttlMs").asLong());
        String digest = rawDigest();
        LeaseholdClient c = client(service.url);
        CountDownLatch firstLeading = new CountDownLatch(1);
        Election first = new Election(c, P, digest, "first", Election.Options.ttl(ttl), new Election.Listener() {
            @Override
            public void startedLeading(Term term) {
                firstLeading.countDown();
            }
        });
        CompletableFuture<Void> firstCampaign = first.start();
        assertTrue(firstLeading.await(5, TimeUnit.SECONDS), "the first never led");
        Candidate cand = second(c, digest, ttl);
        campaigning(service);
        first.resign();
        long resignedAt = System.nanoTime();
        firstCampaign.get(5, TimeUnit.SECONDS);
        assertTrue(cand.leading().await(5, TimeUnit.SECONDS), "the second never led");
        cand.election().resign();
        cand.campaign().get(5, TimeUnit.SECONDS);
        // The new leader's acquire may be answered before `resign` returns: negative.
        double signed = (cand.startedAt().get() - resignedAt) / 1e6;
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("nextLeaderWithinMs", Math.max(0.0, signed));
        o.put("signedMs", signed);
        return o;
    }

    static final Map<String, Scenario> HARNESSES = Map.of(
            "drop_reply", ConformanceTest::dropReply,
            "freeze_store", ConformanceTest::freezeStore,
            "delete_lease_key", (s, svc) -> deleteLeaseKey(s, svc),
            "kill_leader_process", ConformanceTest::killLeaderProcess,
            "resign", ConformanceTest::resign);

    static void check(JsonNode expect, Map<String, Object> observed) {
        for (var it = expect.fields(); it.hasNext();) {
            var e = it.next();
            String name = e.getKey();
            JsonNode wanted = e.getValue();
            if (name.equals("stateIn")) {
                List<String> allowed = new ArrayList<>();
                wanted.forEach(w -> allowed.add(w.asText()));
                assertTrue(allowed.contains(String.valueOf(observed.get("state"))), "state " + observed);
                continue;
            }
            assertTrue(observed.containsKey(name), "this runner does not observe " + name);
            Object got = observed.get(name);
            if (name.endsWith("WithinMs")) {
                double ms = ((Number) got).doubleValue();
                assertTrue(ms <= wanted.asDouble(), name + ": " + ms + " ms > " + wanted + " ms");
            } else if (wanted.isBoolean()) {
                assertEquals(wanted.asBoolean(), got, name + " " + observed);
            } else if (wanted.isNumber()) {
                assertEquals(wanted.asLong(), ((Number) got).longValue(), name + " " + observed);
            } else {
                assertEquals(wanted.asText(), String.valueOf(got), name + " " + observed);
            }
        }
    }

    @TestFactory
    List<DynamicTest> scenarios() throws Exception {
        JsonNode table = Wire.JSON.readTree(Harness.REPO_ROOT.resolve("clients/conformance/scenarios.json").toFile());
        List<DynamicTest> tests = new ArrayList<>();
        for (JsonNode s : table.get("scenarios")) {
            String kind = s.at("/fault/kind").asText();
            List<String> stores = s.get("store").asText().equals("any") ? List.of("memory", "redis")
                    : List.of(s.get("store").asText());
            for (String store : stores) {
                tests.add(DynamicTest.dynamicTest(s.get("id").asText() + "-" + store, () -> {
                    Scenario h = HARNESSES.get(kind);
                    if (h == null) {
                        fail("no harness for fault kind " + kind);
                    }
                    boolean fresh = kind.equals("freeze_store") || kind.equals("delete_lease_key");
                    Map<String, Object> observed;
                    if (store.equals("memory")) {
                        observed = h.run(s, memory());
                    } else if (!fresh) {
                        observed = h.run(s, redisService());
                    } else {
                        try (Harness.Redis r = new Harness.Redis(); Harness.Service svc = new Harness.Service(r)) {
                            observed = h.run(s, svc);
                        }
                    }
                    System.out.println(s.get("id").asText() + " [" + store + "]: " + observed);
                    check(s.get("expect"), observed);
                    if (observed.containsKey("interrupted")) {
                        assertEquals(true, observed.get("interrupted"), "the work was interrupted on loss");
                    }
                }));
            }
        }
        return tests;
    }
}
