package io.leasehold.client;

import java.io.BufferedWriter;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.atomic.AtomicReference;

/**
 * A worker of the mixed checked history ({@code tests/it/mixed_history.rs}), speaking the protocol
 * of {@code clients/python/tests/mixed_worker.py}: threads that take turns on shared resources with
 * {@link LeaseholdClient#lock} and write, as JSON lines, when each believed it held a lease.
 *
 * <p>Usage: {@code MixedWorker OUT DURATION_MS TTL_MS NAME URL[,URL...] RAW_ID[,RAW_ID...] [TASKS]}.
 * Each of TASKS threads (default 2), named {@code NAME-<i>}, runs rounds until DURATION_MS have
 * passed: round {@code r} locks {@code RAW_ID[(i + r / 3) % n]} through {@code URL[(i + r) % m]}
 * (purpose {@code mixed}), works up to 1.5 TTL (the keeper renews), stopping early when the lock
 * interrupts it, and writes one {@code belief} line per hold; then one {@code summary} line. Times
 * are wall-clock milliseconds, the clock the other languages' workers use.
 */
public final class MixedWorker {
    static final String PURPOSE = "mixed";

    private MixedWorker() {}

    static double nowMs() {
        Instant t = Instant.now();
        return t.getEpochSecond() * 1000.0 + t.getNano() / 1e6;
    }

    /** One JSON line per record, flushed at once, from any thread. */
    static final class Out {
        private final BufferedWriter w;

        Out(Path path) throws IOException {
            w = Files.newBufferedWriter(path, StandardCharsets.UTF_8);
        }

        synchronized void write(Map<String, Object> record) {
            try {
                w.write(Wire.JSON.writeValueAsString(record));
                w.write("\n");
                w.flush();
            } catch (IOException e) {
                throw new IllegalStateException(e);
            }
        }

        synchronized void close() throws IOException {
            w.close();
        }
    }

    static void task(Out out, String worker, int index, double stopAt, Duration ttl, List<String> urls,
            List<String> ids) {
        Random rng = new Random(worker.hashCode());
        Map<String, Long> counts = new LinkedHashMap<>();
        int rounds = 0;
        int beliefs = 0;
        List<LeaseholdClient> clients = new ArrayList<>();
        for (String url : urls) {
            clients.add(LeaseholdClient.builder(url).timeout(Duration.ofSeconds(2)).build());
        }
        while (nowMs() < stopAt) {
            rounds++;
            int u = (index + rounds) % urls.size();
            String rawId = ids.get((index + rounds / 3) % ids.size());
            AtomicReference<Double> lostAt = new AtomicReference<>();
            double sent = nowMs();
            LockOptions options = LockOptions.ttl(ttl).withWait(ttl.dividedBy(2)).withRetryBudget(Duration.ofSeconds(2))
                    .withOnLost(l -> lostAt.compareAndSet(null, nowMs()));
            try (LockHandle lock = clients.get(u).lock(PURPOSE, Names.digest(rawId), options)) {
                double start = nowMs();
                long work = (long) (50 + rng.nextDouble() * (1.5 * ttl.toMillis() - 50));
                try {
                    Thread.sleep(work); // the work: stopped by the lock's interrupt on loss
                } catch (InterruptedException e) {
                    // the loss signal: stop working
                }
                double bodyEnd = nowMs();
                Double lost = lostAt.get();
                double end = lost == null ? bodyEnd : Math.min(bodyEnd, lost);
                String ended = "released";
                if (lost != null) {
                    LeaseState s = lock.lease().state();
                    ended = s == LeaseState.LOST || s == LeaseState.UNKNOWN ? s.wireName() : "expiring";
                }
                Map<String, Object> b = new LinkedHashMap<>();
                b.put("kind", "belief");
                b.put("lang", "java");
                b.put("worker", worker);
                b.put("resource", rawId);
                b.put("url", urls.get(u));
                b.put("token", lock.lease().fencingToken());
                b.put("sentMs", sent);
                b.put("startMs", start);
                b.put("endMs", end);
                b.put("how", lock.outcome());
                b.put("ended", ended);
                out.write(b);
                beliefs++;
                counts.merge("held via " + lock.outcome(), 1L, Long::sum);
                counts.merge("ended " + ended, 1L, Long::sum);
            } catch (NotAcquiredException e) {
                counts.merge("not acquired: " + e.outcome().outcome(), 1L, Long::sum);
            } catch (LeaseholdException e) {
                counts.merge("lock failed: " + e.getClass().getSimpleName(), 1L, Long::sum);
            }
            Thread.interrupted(); // an interrupt that came after the body is not the next round's
        }
        Map<String, Object> s = new LinkedHashMap<>();
        s.put("kind", "summary");
        s.put("lang", "java");
        s.put("worker", worker);
        s.put("rounds", rounds);
        s.put("beliefs", beliefs);
        s.put("counts", counts);
        out.write(s);
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 6 && args.length != 7) {
            System.err.println("usage: MixedWorker OUT DURATION_MS TTL_MS NAME URL[,URL...] RAW_ID[,RAW_ID...] [TASKS]");
            System.exit(2);
        }
        double stopAt = nowMs() + Double.parseDouble(args[1]);
        Duration ttl = Duration.ofMillis(Long.parseLong(args[2]));
        List<String> urls = List.of(args[4].split(","));
        List<String> ids = List.of(args[5].split(","));
        int tasks = args.length == 7 ? Integer.parseInt(args[6]) : 2;
        // Class loading in a cold JVM would eat the first leases' validity (counted from the send).
        for (String url : urls) {
            LeaseholdClient c = LeaseholdClient.builder(url).timeout(Duration.ofSeconds(2)).build();
            for (int i = 0; i < 3; i++) {
                try {
                    c.inspect(PURPOSE, Names.digest(ids.get(0)), null);
                    c.inspectAsync(PURPOSE, Names.digest(ids.get(0)), null).join();
                } catch (RuntimeException e) {
                    // a fault already under way: the rounds will meet it too
                }
            }
        }
        Out out = new Out(Path.of(args[0]));
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < tasks; i++) {
            int index = i;
            String worker = args[3] + "-" + i;
            Thread t = new Thread(() -> task(out, worker, index, stopAt, ttl, urls, ids), worker);
            threads.add(t);
            t.start();
        }
        for (Thread t : threads) {
            t.join();
        }
        out.close();
    }
}
