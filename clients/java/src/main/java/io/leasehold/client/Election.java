package io.leasehold.client;

import io.leasehold.client.Outcomes.AcquireOutcome;
import io.leasehold.client.Outcomes.Contended;
import io.leasehold.client.Outcomes.Held;
import io.leasehold.client.Outcomes.LimitMismatch;
import io.leasehold.client.Outcomes.Lost;
import io.leasehold.client.Outcomes.OwnerOperationConflict;
import io.leasehold.client.Outcomes.RenewOutcome;
import io.leasehold.client.Records.Inspection;
import io.leasehold.client.Records.Leader;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * Leader election on one lease (DESIGN §10), after client-go's {@code leaderelection} and etcd's
 * {@code concurrency.Election}: campaigning is acquiring with a wait and a {@code holder} label, the
 * leader is whoever inspect names, observing is the long-poll, proclaiming is renewing with a new
 * label, resigning is releasing.
 *
 * <p>{@link #campaign()} runs until {@link #resign()}: when it wins it calls
 * {@link Listener#startedLeading} on a thread of the term's own (interrupted when the term ends),
 * keeps the lease renewed, and when the term ends calls {@link Listener#stoppedLeading}; a term that
 * ended by itself is followed by a new campaign. With {@code follow} every change of leader goes to
 * {@link Listener#newLeader}. Safety comes from the lease: a term ends ({@link Term#ended()}), and
 * its thread is interrupted, before the lease's local validity ends; present
 * {@link Term#fencingToken()} with every effect.
 */
public final class Election {
    private static final Logger LOG = Logger.getLogger("io.leasehold.client.election");
    /** The pause before asking again with the same attempt after an uncertain answer. */
    static final Duration SAME_ATTEMPT_PAUSE = Duration.ofMillis(50);

    /** Why a term ended. */
    public enum StopReason {
        /** {@link #resign()} was called; the lease was released. */
        RESIGNED,
        /** The service said the lease is gone. */
        LOST,
        /** A renew got no certain reply: the lease is no longer ours to use. */
        UNKNOWN,
        /** Local validity was about to run out unrenewed. */
        EXPIRING
    }

    /** What a candidate hears; every method is optional. Called on the election's threads. */
    public interface Listener {
        /** This candidate leads: do the term's work here (the thread is interrupted when the term ends). */
        default void startedLeading(Term term) {}

        /** The term ended, for {@code reason}; the lease is released unless LOST. */
        default void stoppedLeading(Term term, StopReason reason) {}

        /** The leader changed (another holder label, another term, or nobody). */
        default void newLeader(Leader leader) {}
    }

    /** Options of a candidate: lease {@code ttl}, server-side {@code waitFor} per acquire, a {@code retryPeriod}
     * after failures, a {@code leadingMargin} (null: TTL/10), and whether to {@code follow} the leader. */
    public record Options(Duration ttl, Duration waitFor, Duration retryPeriod, Duration leadingMargin, boolean follow) {
        public static Options ttl(Duration ttl) {
            return new Options(ttl, Duration.ofSeconds(10), Duration.ofSeconds(1), null, true);
        }

        public Options withWait(Duration d) {
            return new Options(ttl, d, retryPeriod, leadingMargin, follow);
        }

        public Options withRetryPeriod(Duration d) {
            return new Options(ttl, waitFor, d, leadingMargin, follow);
        }

        public Options withLeadingMargin(Duration d) {
            return new Options(ttl, waitFor, retryPeriod, d, follow);
        }

        public Options withFollow(boolean on) {
            return new Options(ttl, waitFor, retryPeriod, leadingMargin, on);
        }
    }

    /** One term of leadership. */
    public static final class Term {
        private final long fencingToken;
        private volatile String holder;
        private final Lease lease;
        private final CompletableFuture<StopReason> ended = new CompletableFuture<>();

        Term(long fencingToken, String holder, Lease lease) {
            this.fencingToken = fencingToken;
            this.holder = holder;
            this.lease = lease;
        }

        public long fencingToken() {
            return fencingToken;
        }

        public String holder() {
            return holder;
        }

        public Lease lease() {
            return lease;
        }

        /** Completes with the reason when the term ends, always before the lease's local validity ends. */
        public CompletableFuture<StopReason> ended() {
            return ended.copy();
        }

        public boolean isLeading() {
            return !ended.isDone();
        }
    }

    private final LeaseholdClient client;
    private final String purpose;
    private final String digest;
    private volatile String holder;
    private final Options options;
    private final Duration leadingMargin;
    private final Listener listener;
    private final AtomicInteger rounds = new AtomicInteger();
    private volatile Term term;
    private volatile CompletableFuture<Void> stop;
    private volatile CountDownLatch done;

    public Election(LeaseholdClient client, String purpose, String digest, String holder, Options options,
            Listener listener) {
        this.client = client;
        this.purpose = Names.checkPurpose(purpose);
        this.digest = Names.checkDigest(digest);
        this.holder = Names.checkHolder(holder);
        this.options = options;
        long ttl = options.ttl().toNanos();
        long margin = options.leadingMargin() == null ? ttl / 10 : options.leadingMargin().toNanos();
        this.leadingMargin = Duration.ofNanos(Math.min(Math.max(0, margin), ttl / 2));
        this.listener = listener == null ? new Listener() {} : listener;
    }

    /** The label this candidate campaigns with now. */
    public String holder() {
        return holder;
    }

    /** The current term while leading, else null. */
    public Term term() {
        Term t = term;
        return t != null && t.isLeading() ? t : null;
    }

    public boolean isLeader() {
        return term() != null;
    }

    /** Who leads now, by one plain inspect. */
    public Leader leader() {
        return Leader.of(client.inspect(purpose, digest, null));
    }

    /** Runs {@link #campaign()} on a daemon thread of its own; the future completes when it returns. */
    public CompletableFuture<Void> start() {
        CompletableFuture<Void> f = new CompletableFuture<>();
        CountDownLatch ready = new CountDownLatch(1);
        Thread t = new Thread(() -> {
            try {
                campaign(ready);
                f.complete(null);
            } catch (RuntimeException e) {
                ready.countDown();
                f.completeExceptionally(e);
            }
        }, "leasehold-election");
        t.setDaemon(true);
        t.start();
        try {
            ready.await(); // resign() after start() always finds the campaign
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        return f;
    }

    /**
     * Runs the election until {@link #resign()} (which releases the lease). Throws
     * {@link RejectedException} when the service refuses the requests as sent, IllegalStateException
     * when already campaigning.
     */
    public void campaign() {
        campaign(new CountDownLatch(1));
    }

    private void campaign(CountDownLatch ready) {
        CompletableFuture<Void> stopNow;
        CountDownLatch doneNow;
        synchronized (this) { // no I/O under this monitor
            if (stop != null) {
                throw new IllegalStateException("a campaign is already running on this election");
            }
            stopNow = stop = new CompletableFuture<>();
            doneNow = done = new CountDownLatch(1);
        }
        ready.countDown();
        Thread follower = null;
        try {
            if (options.follow()) {
                follower = new Thread(() -> follow(stopNow), "leasehold-election-follow");
                follower.setDaemon(true);
                follower.start();
            }
            while (true) {
                Lease won = win(stopNow);
                if (won == null || lead(stopNow, won) == StopReason.RESIGNED) {
                    return;
                }
            }
        } finally {
            stopNow.complete(null);
            synchronized (this) {
                stop = null;
                done = null;
            }
            doneNow.countDown();
        }
    }

    /**
     * Ends a running campaign: the term ends (its thread interrupted), the lease is released,
     * {@code stoppedLeading(term, RESIGNED)} is called and {@link #campaign()} returns. Waits until it
     * has; returns at once without a campaign.
     */
    public void resign() {
        CompletableFuture<Void> s;
        CountDownLatch d;
        synchronized (this) {
            s = stop;
            d = done;
        }
        if (s == null || d == null) {
            return;
        }
        s.complete(null);
        boolean interrupted = false;
        while (true) {
            try {
                d.await();
                break;
            } catch (InterruptedException e) {
                interrupted = true;
            }
        }
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
    }

    /** Renews with {@code holder = label} (the fencing token stays). Throws {@link NotLeaderException} when not leading. */
    public void proclaim(String label) {
        Term t = term();
        if (t == null) {
            throw new NotLeaderException("not the leader");
        }
        RenewOutcome o = client.renew(purpose, digest, t.lease().attempt(), options.ttl(), Names.checkHolder(label));
        if (o instanceof Lost l) {
            throw new NotLeaderException("the lease is gone (" + l.reason() + ")");
        }
        holder = label;
        t.holder = label;
    }

    // -- the campaign ----------------------------------------------------------------

    private static void awaitEither(CompletableFuture<?> a, CompletableFuture<?> b) {
        CompletableFuture.anyOf(a.handle((r, e) -> null), b.handle((r, e) -> null)).join();
    }

    /** Sleeps unless stopped first; true when stopped. */
    private static boolean sleepUnless(CompletableFuture<Void> stop, Duration d) {
        try {
            stop.get(Math.max(0, d.toNanos()), TimeUnit.NANOSECONDS);
            return true;
        } catch (java.util.concurrent.TimeoutException e) {
            return false;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return true;
        } catch (java.util.concurrent.ExecutionException e) {
            return true;
        }
    }

    private void follow(CompletableFuture<Void> stop) {
        String version = null;
        Leader last = null;
        while (!stop.isDone()) {
            long asked = System.nanoTime();
            CompletableFuture<Inspection> f = version == null ? client.inspectAsync(purpose, digest, null)
                    : client.inspectChangedAsync(purpose, digest, version, options.waitFor());
            awaitEither(f, stop);
            if (stop.isDone()) {
                f.cancel(true);
                return;
            }
            Inspection seen;
            try {
                seen = f.join();
            } catch (RuntimeException e) {
                LOG.log(Level.FINE, "observe long-poll failed", e);
                if (sleepUnless(stop, options.retryPeriod())) {
                    return;
                }
                continue;
            }
            if (seen.version().equals(version) && System.nanoTime() - asked < options.waitFor().toNanos() / 2
                    && sleepUnless(stop, options.retryPeriod())) {
                return; // a service that does not hold long-polls: poll at the retry period
            }
            version = seen.version();
            Leader leader = Leader.of(seen);
            if (!leader.equals(last)) {
                last = leader;
                try {
                    listener.newLeader(leader);
                } catch (RuntimeException e) {
                    LOG.log(Level.WARNING, "newLeader threw", e);
                }
            }
        }
    }

    private Attempt newAttempt() {
        return Attempt.generate("campaign-" + rounds.getAndIncrement() + "-" + java.util.UUID.randomUUID());
    }

    private void cleanUp(Attempt attempt) {
        try {
            client.releaseAsync(purpose, digest, attempt).get(5, TimeUnit.SECONDS);
        } catch (Exception e) {
            LOG.log(Level.FINE, "campaign clean-up release failed", e);
            if (e instanceof InterruptedException) {
                Thread.currentThread().interrupt();
            }
        }
    }

    private Lease win(CompletableFuture<Void> stop) {
        Attempt attempt = newAttempt();
        boolean mayHold = false;
        AcquireOptions ask = AcquireOptions.ttl(options.ttl()).withWait(options.waitFor()).withHolder(holder);
        while (true) {
            CompletableFuture<AcquireOutcome> request = client.acquireAsync(purpose, digest, attempt,
                    ask.withHolder(holder));
            awaitEither(request, stop);
            if (stop.isDone() && !request.isDone()) {
                // Stopped with the acquire in flight: it may have acquired just before.
                request.cancel(true);
                cleanUp(attempt);
                return null;
            }
            Object answer;
            try {
                answer = request.join();
            } catch (java.util.concurrent.CompletionException e) {
                answer = Lease.unwrap(e);
            }
            if (answer instanceof Held held) {
                if (stop.isDone()) {
                    held.lease().releaseAsync();
                    return null;
                }
                return held.lease();
            }
            Duration pause;
            if (answer instanceof Contended c) {
                mayHold = false;
                long waited = c.waitedMs() == null ? 0 : c.waitedMs();
                pause = options.waitFor().toMillis() > 0 && waited >= options.waitFor().toMillis() / 2 ? Duration.ZERO
                        : min(Duration.ofMillis(c.retryAfterMs()), options.retryPeriod());
            } else if (answer instanceof OwnerOperationConflict) {
                attempt = newAttempt();
                mayHold = false;
                pause = options.retryPeriod();
            } else if (answer instanceof LimitMismatch) {
                mayHold = false;
                pause = options.retryPeriod();
            } else if (answer instanceof UnavailableException u) {
                pause = u.retryAfterMs() == null ? options.retryPeriod() : Duration.ofMillis(u.retryAfterMs());
            } else if (answer instanceof OverloadedException o) {
                pause = o.retryAfterMs() == null ? options.retryPeriod() : Duration.ofMillis(o.retryAfterMs());
            } else if (answer instanceof IndeterminateException) {
                mayHold = true;
                pause = min(SAME_ATTEMPT_PAUSE, options.retryPeriod());
            } else {
                if (mayHold) {
                    cleanUp(attempt);
                }
                if (answer instanceof RuntimeException e) {
                    throw e;
                }
                throw new LeaseholdException("campaign failed", (Throwable) answer);
            }
            if (sleepUnless(stop, pause)) {
                if (mayHold) {
                    cleanUp(attempt);
                }
                return null;
            }
        }
    }

    private static Duration min(Duration a, Duration b) {
        return a.compareTo(b) <= 0 ? a : b;
    }

    private StopReason lead(CompletableFuture<Void> stop, Lease lease) {
        Keeper keeper = new Keeper(lease, leadingMargin);
        Term t = new Term(lease.fencingToken(), lease.record().holder() != null ? lease.record().holder() : holder,
                lease);
        term = t;
        keeper.start();
        Thread work = new Thread(() -> {
            try {
                listener.startedLeading(t);
            } catch (RuntimeException e) {
                LOG.log(Level.WARNING, "startedLeading threw", e);
            }
        }, "leasehold-term-" + t.fencingToken());
        work.setDaemon(true);
        work.start();
        awaitEither(stop, lease.ended());
        LeaseState state = lease.state();
        StopReason reason;
        if (state == LeaseState.ACTIVE) {
            reason = StopReason.RESIGNED;
        } else if (state == LeaseState.UNKNOWN) {
            reason = StopReason.UNKNOWN;
        } else if (lease.expiredLocally()) {
            reason = StopReason.EXPIRING;
        } else {
            reason = StopReason.LOST;
        }
        // The term is over before anything else happens.
        t.ended.complete(reason);
        work.interrupt();
        keeper.stop();
        if (reason != StopReason.LOST) {
            // Resigning gives the lease back; so does a term that ended with the lease possibly still
            // ours, so the next leader need not wait for the expiry.
            try {
                lease.releaseAsync().get(5, TimeUnit.SECONDS);
            } catch (Exception e) {
                LOG.log(Level.FINE, "leadership release failed", e);
                if (e instanceof InterruptedException) {
                    Thread.currentThread().interrupt();
                }
            }
        }
        term = null;
        try {
            work.join(Math.max(1, options.ttl().toMillis()));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        try {
            listener.stoppedLeading(t, reason);
        } catch (RuntimeException e) {
            LOG.log(Level.WARNING, "stoppedLeading threw", e);
        }
        return reason;
    }
}
