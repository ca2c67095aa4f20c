package io.leasehold.client;

import io.leasehold.client.HandleCore.ReleaseReply;
import io.leasehold.client.HandleCore.RenewReply;
import io.leasehold.client.Outcomes.AlreadyAbsent;
import io.leasehold.client.Outcomes.Lost;
import io.leasehold.client.Outcomes.NotOwner;
import io.leasehold.client.Outcomes.ReleaseOutcome;
import io.leasehold.client.Outcomes.Released;
import io.leasehold.client.Outcomes.RenewOutcome;
import io.leasehold.client.Outcomes.Renewed;
import io.leasehold.client.Records.LeaseRecord;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.Consumer;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * One held lease: its fencing token, its local validity counted from the <em>send</em> of the
 * acquire or renew (DESIGN §3.5), and the closed state machine ACTIVE → LOST | RELEASED | UNKNOWN
 * (§3.6). Thread-safe; no lock is held across a request (friendly to virtual threads).
 */
public final class Lease {
    private static final Logger LOG = Logger.getLogger("io.leasehold.client");

    private final LeaseholdClient client;
    private final Attempt attempt;
    private final LeaseRecord record;
    private final ReentrantLock mutex = new ReentrantLock();
    private final HandleCore core;
    private LeaseState published = LeaseState.ACTIVE;
    private final List<Consumer<Lease>> listeners = new ArrayList<>();
    private String lostReason;
    private final CompletableFuture<LeaseState> ended = new CompletableFuture<>();

    Lease(LeaseholdClient client, Attempt attempt, LeaseRecord record, long sent, long ttlNanos, long driftNanos,
            Long holdFrom) {
        this.client = client;
        this.attempt = attempt;
        this.record = record;
        this.core = new HandleCore(sent, ttlNanos, record.remainingMs() * 1_000_000L, driftNanos);
        if (record.maxHoldMs() != null) {
            if (holdFrom != null) {
                core.limitHold(holdFrom + record.maxHoldMs() * 1_000_000L - driftNanos);
            }
            if (capped(record)) {
                core.reachHoldEnd();
            }
        }
    }

    private boolean capped(LeaseRecord r) {
        return r.ttlMs() * 1_000_000L < core.ttlNanos;
    }

    /** Present it with every effect; the resource refuses tokens lower than one it saw. */
    public long fencingToken() {
        return record.fencingToken();
    }

    /** The lease as the acquire answered it. */
    public LeaseRecord record() {
        return record;
    }

    public String purpose() {
        return record.purpose();
    }

    public String digest() {
        return record.digest();
    }

    public Attempt attempt() {
        return attempt;
    }

    /** The TTL asked for on acquire and on every renew. */
    public Duration ttl() {
        return Duration.ofNanos(core.ttlNanos);
    }

    /** The drift taken off this lease's validity: max(drift budget, fraction × TTL granted). */
    public Duration drift() {
        return Duration.ofNanos(core.driftNanos);
    }

    /** The state now (an ACTIVE handle past its validity becomes LOST here). */
    public LeaseState state() {
        LeaseState s;
        mutex.lock();
        try {
            s = core.observe(System.nanoTime());
        } finally {
            mutex.unlock();
        }
        publish(s);
        return s;
    }

    /** Whether the lease is ACTIVE and locally valid now. */
    public boolean isValid() {
        return state() == LeaseState.ACTIVE;
    }

    /** Local validity left now; zero unless ACTIVE. */
    public Duration validFor() {
        long left;
        LeaseState s;
        mutex.lock();
        try {
            long now = System.nanoTime();
            s = core.observe(now);
            left = core.validFor(now);
        } finally {
            mutex.unlock();
        }
        publish(s);
        return Duration.ofNanos(left);
    }

    /** The end of local validity, a {@code System.nanoTime()} instant. */
    public long validUntilNanos() {
        mutex.lock();
        try {
            return core.validUntil;
        } finally {
            mutex.unlock();
        }
    }

    /** Whether it became LOST because local validity ran out (not by the service's word). */
    public boolean expiredLocally() {
        mutex.lock();
        try {
            return core.expiredLocally;
        } finally {
            mutex.unlock();
        }
    }

    boolean atHoldEnd() {
        mutex.lock();
        try {
            return core.atHoldEnd();
        } finally {
            mutex.unlock();
        }
    }

    /** The service's {@code reason} when a renew answered {@code lost}, {@code max_hold} at a bounded hold's end, else null. */
    public String lostReason() {
        mutex.lock();
        try {
            if (lostReason != null) {
                return lostReason;
            }
            return core.expiredLocally && core.atHoldEnd() ? "max_hold" : null;
        } finally {
            mutex.unlock();
        }
    }

    /** Throws {@link LeaseLostException} unless the lease is ACTIVE and locally valid now. */
    public void check() {
        LeaseState s = state();
        if (s != LeaseState.ACTIVE) {
            throw new LeaseLostException(s, fencingToken(), lostReason(), null);
        }
    }

    /**
     * Calls {@code listener} once when the lease becomes LOST or UNKNOWN (at once if it already is),
     * on the thread that noticed it. A release never calls it.
     */
    public void onLost(Consumer<Lease> listener) {
        LeaseState s;
        mutex.lock();
        try {
            s = published;
            if (s == LeaseState.ACTIVE) {
                listeners.add(listener);
                return;
            }
        } finally {
            mutex.unlock();
        }
        if (s == LeaseState.LOST || s == LeaseState.UNKNOWN) {
            listener.accept(this);
        }
    }

    /** Completes with the terminal state when the handle leaves ACTIVE (LOST, UNKNOWN or RELEASED). */
    public CompletableFuture<LeaseState> ended() {
        return ended.copy();
    }

    void giveUp() {
        LeaseState s;
        mutex.lock();
        try {
            s = core.giveUp(System.nanoTime());
        } finally {
            mutex.unlock();
        }
        publish(s);
    }

    private void publish(LeaseState s) {
        List<Consumer<Lease>> toCall;
        mutex.lock();
        try {
            if (s == published || published != LeaseState.ACTIVE) {
                return;
            }
            published = s;
            toCall = new ArrayList<>(listeners);
            listeners.clear();
        } finally {
            mutex.unlock();
        }
        if (s == LeaseState.LOST || s == LeaseState.UNKNOWN) {
            for (Consumer<Lease> l : toCall) {
                try {
                    l.accept(this);
                } catch (RuntimeException e) { // one listener's failure must not silence the others
                    LOG.log(Level.WARNING, "a lease-lost listener threw", e);
                }
            }
        }
        ended.complete(s);
    }

    private long beginRenew() {
        LeaseState s;
        mutex.lock();
        try {
            s = core.beginRenew(System.nanoTime());
        } finally {
            mutex.unlock();
        }
        publish(s);
        if (s != LeaseState.ACTIVE) {
            throw new RefusedException(s);
        }
        return System.nanoTime();
    }

    private void finishRenew(long sent, RenewOutcome result, Throwable error) {
        RenewReply reply;
        long remaining = 0;
        boolean capped = false;
        if (result instanceof Renewed r) {
            reply = RenewReply.RENEWED;
            remaining = r.record().remainingMs() * 1_000_000L;
            capped = r.record().maxHoldMs() != null && capped(r.record());
        } else if (result instanceof Lost l) {
            reply = RenewReply.LOST;
            mutex.lock();
            try {
                lostReason = l.reason();
            } finally {
                mutex.unlock();
            }
        } else if (error instanceof IndeterminateException || error instanceof java.util.concurrent.CancellationException) {
            reply = RenewReply.INDETERMINATE;
        } else {
            reply = RenewReply.NOT_APPLIED;
        }
        LeaseState s;
        mutex.lock();
        try {
            s = core.finishRenew(System.nanoTime(), sent, reply, remaining, capped);
        } finally {
            mutex.unlock();
        }
        publish(s);
    }

    /**
     * Renews with the handle's TTL (and a new public {@code holder} label unless null). Refused
     * locally ({@link RefusedException}) on a terminal handle; {@code renewed} restarts validity from
     * this call's send; {@code lost} → LOST; indeterminate → UNKNOWN.
     */
    public RenewOutcome renew(String holder) {
        long sent = beginRenew();
        RenewOutcome result;
        try {
            result = client.renew(purpose(), digest(), attempt, ttl(), holder);
        } catch (RuntimeException e) {
            finishRenew(sent, null, e);
            throw e;
        }
        finishRenew(sent, result, null);
        return result;
    }

    public RenewOutcome renew() {
        return renew(null);
    }

    /** {@link #renew(String)} without blocking; a cancelled renew makes the handle UNKNOWN. */
    public CompletableFuture<RenewOutcome> renewAsync(String holder) {
        long sent;
        try {
            sent = beginRenew();
        } catch (RefusedException e) {
            return CompletableFuture.failedFuture(e);
        }
        // The answer is handed on only once the handle has taken it in, so a caller (the keeper)
        // never reads the validity from before it.
        return client.renewAsync(purpose(), digest(), attempt, ttl(), holder)
                .whenComplete((r, e) -> finishRenew(sent, r, unwrap(e)));
    }

    static Throwable unwrap(Throwable e) {
        while (e instanceof java.util.concurrent.CompletionException && e.getCause() != null) {
            e = e.getCause();
        }
        return e;
    }

    private void beginRelease() {
        boolean allowed;
        mutex.lock();
        try {
            allowed = core.beginRelease(System.nanoTime());
        } finally {
            mutex.unlock();
        }
        if (!allowed) {
            throw new RefusedException(LeaseState.RELEASED);
        }
    }

    private void finishRelease(ReleaseOutcome result, Throwable error) {
        ReleaseReply reply;
        if (result instanceof Released || result instanceof AlreadyAbsent) {
            reply = ReleaseReply.RELEASED;
        } else if (result instanceof NotOwner) {
            reply = ReleaseReply.NOT_OWNER;
        } else if (error instanceof IndeterminateException || error instanceof java.util.concurrent.CancellationException) {
            reply = ReleaseReply.INDETERMINATE;
        } else {
            reply = ReleaseReply.NOT_APPLIED;
        }
        LeaseState s;
        mutex.lock();
        try {
            s = core.finishRelease(System.nanoTime(), reply);
        } finally {
            mutex.unlock();
        }
        publish(s);
    }

    /**
     * Releases. {@code released}/{@code already_absent} → RELEASED, {@code not_owner} → LOST,
     * indeterminate → UNKNOWN. A LOST or UNKNOWN handle still sends it (clean-up).
     */
    public ReleaseOutcome release() {
        beginRelease();
        ReleaseOutcome result;
        try {
            result = client.release(purpose(), digest(), attempt);
        } catch (RuntimeException e) {
            finishRelease(null, e);
            throw e;
        }
        finishRelease(result, null);
        return result;
    }

    /** {@link #release()} without blocking. */
    public CompletableFuture<ReleaseOutcome> releaseAsync() {
        try {
            beginRelease();
        } catch (RefusedException e) {
            return CompletableFuture.failedFuture(e);
        }
        return client.releaseAsync(purpose(), digest(), attempt).whenComplete((r, e) -> finishRelease(r, unwrap(e)));
    }

    @Override
    public String toString() {
        return "Lease[" + purpose() + "/" + digest().substring(0, 11) + "… fencingToken=" + fencingToken() + " state="
                + state() + "]";
    }
}
