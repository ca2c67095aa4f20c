package io.leasehold.client;

import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * The watchdog of one lease (DESIGN §5, §15): a daemon thread that renews at about a third of the
 * validity left (jittered 80-100 %) and gives the lease up (LOST, its loss listeners called)
 * {@code stopMargin} before local validity ends when no renew extended it. Renewals are sent
 * asynchronously, so a hung request cannot delay the signal.
 */
public final class Keeper {
    /** The shortest pause between two renewals of one lease. */
    static final long MIN_PAUSE_NANOS = 5_000_000L;

    private final Lease lease;
    private final long margin;
    private final CountDownLatch stop = new CountDownLatch(1);
    private final Thread thread;
    private volatile int renewals;
    private volatile Throwable lastError;

    /** A keeper of {@code lease}; {@code stopMargin} null means TTL/10 (at least one drift, at most TTL/2). */
    public Keeper(Lease lease, Duration stopMargin) {
        this.lease = lease;
        this.margin = margin(lease, stopMargin);
        this.thread = new Thread(this::run, "leasehold-keeper");
        this.thread.setDaemon(true);
    }

    /**
     * How long before local validity ends the work is stopped when no renew landed: {@code stopMargin}
     * (default TTL/10), at least one drift (so the work has stopped before the store may hand the lease
     * on), at most TTL/2, of the TTL granted.
     */
    static long margin(Lease lease, Duration stopMargin) {
        long granted = lease.record().ttlMs() * 1_000_000L;
        long asked = lease.ttl().toNanos();
        long ttl = granted > 0 ? Math.min(asked, granted) : asked;
        long m = stopMargin == null ? ttl / 10 : stopMargin.toNanos();
        return Math.min(Math.max(lease.drift().toNanos(), m), ttl / 2);
    }

    public void start() {
        thread.start();
    }

    /** Stops renewing (does not release); returns without waiting for a renew in flight. */
    public void stop() {
        stop.countDown();
        thread.interrupt();
    }

    /** Renewals that answered {@code renewed} or {@code lost}. */
    public int renewals() {
        return renewals;
    }

    /** The last renew's error (unavailable and overloaded leave the lease ACTIVE). */
    public Throwable lastError() {
        return lastError;
    }

    private long nextRenew(long now, long giveUpAt) {
        double jitter = ThreadLocalRandom.current().nextDouble(0.8, 1.0);
        if (lease.atHoldEnd()) {
            // Renewals no longer extend it (they still hear a break): a third of the TTL.
            return now + (long) (lease.ttl().toNanos() / 3.0 * jitter);
        }
        return now + Math.max(MIN_PAUSE_NANOS, (long) ((giveUpAt - now) / 3.0 * jitter));
    }

    private void run() {
        Long next = null;
        try {
            while (stop.getCount() > 0) {
                if (lease.state() != LeaseState.ACTIVE) {
                    return;
                }
                long now = System.nanoTime();
                long giveUpAt = lease.validUntilNanos() - margin;
                if (now - giveUpAt >= 0) {
                    lease.giveUp();
                    return;
                }
                if (next == null) {
                    next = nextRenew(now, giveUpAt);
                }
                if (now - next < 0) {
                    long until = Math.min(next - now, giveUpAt - now);
                    if (stop.await(until, TimeUnit.NANOSECONDS)) {
                        return;
                    }
                    continue;
                }
                next = null;
                CompletableFuture<Outcomes.RenewOutcome> renewing = lease.renewAsync(null);
                try {
                    renewing.get(Math.max(0, giveUpAt - now), TimeUnit.NANOSECONDS);
                    renewals++;
                } catch (TimeoutException e) {
                    continue; // the next look gives it up
                } catch (ExecutionException e) {
                    // The handle's state says what it meant; `unavailable` and `overloaded` leave it
                    // ACTIVE and the next renew comes sooner.
                    lastError = e.getCause();
                }
            }
        } catch (InterruptedException e) {
            // stop(): end quietly
        }
    }
}
