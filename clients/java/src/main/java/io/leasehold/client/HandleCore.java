package io.leasehold.client;

/**
 * The lease handle's state machine without I/O, driven by explicit {@code System.nanoTime()}
 * instants (the Rust client's {@code HandleCore}; DESIGN §3.5, §3.6). Not thread-safe: the
 * {@link Lease} guards it with its lock.
 *
 * <ul>
 *   <li>renew: sent only from ACTIVE (refused locally otherwise). {@code renewed} extends validity to
 *       {@code renew's send + min(ttl, remainingMs) - drift}; {@code lost} → LOST; indeterminate →
 *       UNKNOWN; not applied (unavailable, overloaded, rejected) → unchanged.
 *   <li>release: sent from anything but RELEASED. {@code released}/{@code already_absent} → RELEASED;
 *       {@code not_owner} → LOST; indeterminate → UNKNOWN; not applied → unchanged.
 *   <li>local validity runs out → LOST. Every input first observes the clock, so a late
 *       {@code renewed} never revives an expired handle.
 * </ul>
 */
final class HandleCore {
    enum RenewReply { RENEWED, LOST, INDETERMINATE, NOT_APPLIED }

    enum ReleaseReply { RELEASED, NOT_OWNER, INDETERMINATE, NOT_APPLIED }

    LeaseState state = LeaseState.ACTIVE;
    final long ttlNanos;
    final long driftNanos;
    long validUntil;
    boolean expiredLocally;
    /** Validity never goes past this instant (a bounded hold's end); {@code Long.MAX_VALUE}: none known. */
    long holdUntil = Long.MAX_VALUE;

    HandleCore(long sent, long ttlNanos, long remainingNanos, long driftNanos) {
        this.ttlNanos = ttlNanos;
        this.driftNanos = driftNanos;
        this.validUntil = validityEnd(sent, ttlNanos, remainingNanos, driftNanos);
    }

    /** {@code sent + min(ttl, remaining) - drift}, never before {@code sent}. */
    static long validityEnd(long sent, long ttl, long remaining, long drift) {
        return sent + Math.max(0, Math.min(ttl, remaining) - drift);
    }

    void limitHold(long until) {
        if (until - holdUntil < 0 || holdUntil == Long.MAX_VALUE) {
            holdUntil = until;
        }
        if (holdUntil - validUntil < 0) {
            validUntil = holdUntil;
        }
    }

    void reachHoldEnd() {
        limitHold(validUntil);
    }

    boolean atHoldEnd() {
        return holdUntil != Long.MAX_VALUE && validUntil - holdUntil >= 0;
    }

    LeaseState observe(long now) {
        if (state == LeaseState.ACTIVE && now - validUntil >= 0) {
            state = LeaseState.LOST;
            expiredLocally = true;
        }
        return state;
    }

    long validFor(long now) {
        return observe(now) == LeaseState.ACTIVE ? Math.max(0, validUntil - now) : 0;
    }

    /** A watchdog whose renewals did not land in time stops treating the lease as ours: LOST. */
    LeaseState giveUp(long now) {
        if (observe(now) == LeaseState.ACTIVE) {
            state = LeaseState.LOST;
            expiredLocally = true;
        }
        return state;
    }

    LeaseState beginRenew(long now) {
        return observe(now);
    }

    LeaseState finishRenew(long now, long sent, RenewReply reply, long remainingNanos, boolean capped) {
        if (observe(now) != LeaseState.ACTIVE) {
            return state;
        }
        switch (reply) {
            case RENEWED:
                long end = validityEnd(sent, ttlNanos, remainingNanos, driftNanos);
                if (end - validUntil > 0) {
                    validUntil = end;
                }
                if (holdUntil != Long.MAX_VALUE && validUntil - holdUntil > 0) {
                    validUntil = holdUntil;
                }
                if (capped) {
                    reachHoldEnd();
                }
                break;
            case LOST:
                state = LeaseState.LOST;
                break;
            case INDETERMINATE:
                state = LeaseState.UNKNOWN;
                break;
            default:
        }
        return observe(now);
    }

    boolean beginRelease(long now) {
        return observe(now) != LeaseState.RELEASED;
    }

    LeaseState finishRelease(long now, ReleaseReply reply) {
        if (observe(now) != LeaseState.ACTIVE) {
            return state;
        }
        switch (reply) {
            case RELEASED:
                state = LeaseState.RELEASED;
                break;
            case NOT_OWNER:
                state = LeaseState.LOST;
                break;
            case INDETERMINATE:
                state = LeaseState.UNKNOWN;
                break;
            default:
        }
        return state;
    }
}
