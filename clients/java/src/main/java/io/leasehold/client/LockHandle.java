package io.leasehold.client;

import io.leasehold.client.Outcomes.AcquireOutcome;
import io.leasehold.client.Outcomes.Held;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantLock;

/**
 * A held lock: what {@link LeaseholdClient#lock} returns, to use with try-with-resources. The
 * attempt is made before the first acquire and kept while the outcome is uncertain; a
 * {@link Keeper} renews; when the lease becomes LOST or UNKNOWN (at the latest the stop margin
 * before local validity ends) the thread that locked is interrupted (unless turned off), the
 * {@code onLost} listener is called and {@link #lostSignal()} completes. {@link #close()} stops the
 * keeper, releases, and clears an interrupt this lock delivered.
 */
public final class LockHandle implements AutoCloseable {
    /** The pause before asking again with the same attempt after an uncertain answer. */
    static final long SAME_ATTEMPT_PAUSE_MS = 50;

    private final LeaseholdClient client;
    private final String purpose;
    private final String digest;
    private final Attempt attempt;
    private final Thread owner;
    private final boolean interrupt;
    private final ReentrantLock mutex = new ReentrantLock();
    private final CompletableFuture<Lease> lostSignal = new CompletableFuture<>();
    private Lease lease;
    private Keeper keeper;
    private int acquireRequests;
    private String outcome;
    private boolean closed;
    private boolean interrupted;

    private LockHandle(LeaseholdClient client, String purpose, String digest, LockOptions options) {
        this.client = client;
        this.purpose = Names.checkPurpose(purpose);
        this.digest = Names.checkDigest(digest);
        String op = options.operationId() != null ? options.operationId()
                : "lock-" + UUID.randomUUID().toString().replace("-", "");
        this.attempt = Attempt.generate(op);
        this.owner = Thread.currentThread();
        this.interrupt = options.interrupt();
    }

    static LockHandle acquire(LeaseholdClient client, String purpose, String digest, LockOptions options) {
        LockHandle h = new LockHandle(client, purpose, digest, options);
        h.acquireLoop(options);
        return h;
    }

    private void acquireLoop(LockOptions options) {
        long started = System.nanoTime();
        long wait = options.acquire().waitFor().toNanos();
        long deadline = started + wait + options.retryBudget().toNanos();
        boolean mayHold = false;
        while (true) {
            acquireRequests++;
            long waitLeft = Math.max(0, started + wait - System.nanoTime());
            AcquireOutcome answer;
            try {
                answer = client.acquire(purpose, digest, attempt,
                        options.acquire().withWait(java.time.Duration.ofMillis(waitLeft / 1_000_000L)));
            } catch (LeaseholdException e) {
                long pause;
                if (e instanceof IndeterminateException) {
                    mayHold = true;
                    pause = SAME_ATTEMPT_PAUSE_MS;
                } else if (e instanceof UnavailableException u) {
                    pause = clamp(u.retryAfterMs());
                } else if (e instanceof OverloadedException o) {
                    pause = clamp(o.retryAfterMs());
                } else {
                    pause = -1;
                }
                if (pause < 0 || Thread.currentThread().isInterrupted()
                        || System.nanoTime() + pause * 1_000_000L - deadline >= 0) {
                    cleanUp(mayHold);
                    throw e;
                }
                try {
                    Thread.sleep(pause); // back-off before the same attempt again
                } catch (InterruptedException ie) {
                    Thread.currentThread().interrupt();
                    cleanUp(mayHold);
                    throw e;
                }
                continue;
            }
            outcome = answer.outcome();
            if (answer instanceof Held held) {
                lease = held.lease();
                break;
            }
            // Someone else holds it (or this owner token does for another operation): we do not.
            throw new NotAcquiredException(answer);
        }
        if (options.onLost() != null) {
            lease.onLost(options.onLost());
        }
        lease.onLost(this::signal);
        keeper = new Keeper(lease, options.stopMargin());
        keeper.start();
    }

    private static long clamp(Long hint) {
        long ms = hint == null ? SAME_ATTEMPT_PAUSE_MS : hint;
        return Math.min(Math.max(ms, SAME_ATTEMPT_PAUSE_MS), 1000);
    }

    private void cleanUp(boolean mayHold) {
        if (mayHold) {
            try {
                client.releaseAsync(purpose, digest, attempt).get(5, TimeUnit.SECONDS);
            } catch (Exception e) {
                // it expires by itself
                if (e instanceof InterruptedException) {
                    Thread.currentThread().interrupt();
                }
            }
        }
    }

    private void signal(Lease l) {
        mutex.lock();
        try {
            if (!closed && interrupt) {
                owner.interrupt();
                interrupted = true;
            }
        } finally {
            mutex.unlock();
        }
        lostSignal.complete(l);
    }

    /** The lease held. */
    public Lease lease() {
        return lease;
    }

    /** The one attempt this lock acquires with. */
    public Attempt attempt() {
        return attempt;
    }

    /** Acquire requests sent (more than one after an uncertain answer). */
    public int acquireRequests() {
        return acquireRequests;
    }

    /** The outcome of the last acquire: {@code acquired} or {@code replayed_same_operation}. */
    public String outcome() {
        return outcome;
    }

    /** Completes (with the lease) when it became LOST or UNKNOWN; never on release. */
    public CompletableFuture<Lease> lostSignal() {
        return lostSignal.copy();
    }

    /** Whether the lease stopped protecting the work before the lock was closed. */
    public boolean lost() {
        return lostSignal.isDone();
    }

    /** Throws {@link LeaseLostException} if the lease no longer protects the work. */
    public void check() {
        if (lost()) {
            throw lostException(null);
        }
        lease.check();
    }

    LeaseLostException lostException(Throwable cause) {
        return new LeaseLostException(lease.state(), lease.fencingToken(), lease.lostReason(), cause);
    }

    /** Stops the keeper and releases (a LOST or UNKNOWN lease too, as clean-up); never throws. */
    @Override
    public void close() {
        boolean clear;
        mutex.lock();
        try {
            if (closed) {
                return;
            }
            closed = true;
            clear = interrupted;
        } finally {
            mutex.unlock();
        }
        if (clear && Thread.currentThread() == owner) {
            Thread.interrupted(); // the interrupt this lock delivered has done its job
        }
        keeper.stop();
        if (lease.state() == LeaseState.RELEASED) {
            return;
        }
        CompletableFuture<Outcomes.ReleaseOutcome> f = lease.releaseAsync();
        boolean wasInterrupted = false;
        while (true) {
            try {
                f.get();
                break;
            } catch (InterruptedException e) {
                wasInterrupted = true;
            } catch (ExecutionException e) {
                break; // it expires by itself
            }
        }
        if (wasInterrupted) {
            Thread.currentThread().interrupt();
        }
    }
}
