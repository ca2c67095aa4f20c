package io.leasehold.client;

import java.time.Duration;

/**
 * What an acquire asks for: {@code ttl}, a server-side {@code waitFor}, a public {@code holder}
 * label, a counting {@code limit}, {@code mode} ({@code exclusive} or {@code shared}),
 * {@code lockDelay} and a bounded hold {@code maxHold} (null: unbounded). Immutable; the
 * {@code with…} methods return a copy.
 */
public record AcquireOptions(Duration ttl, Duration waitFor, String holder, int limit, String mode, Duration lockDelay,
        Duration maxHold) {
    public AcquireOptions {
        if (ttl == null || ttl.isNegative() || ttl.isZero()) {
            throw new IllegalArgumentException("ttl must be positive");
        }
        if (waitFor == null || waitFor.isNegative()) {
            throw new IllegalArgumentException("waitFor must not be negative");
        }
        if (holder != null) {
            Names.checkHolder(holder);
        }
        if (!"exclusive".equals(mode) && !"shared".equals(mode)) {
            throw new IllegalArgumentException("mode must be exclusive or shared");
        }
        if (lockDelay == null || lockDelay.isNegative()) {
            throw new IllegalArgumentException("lockDelay must not be negative");
        }
    }

    /** A lease of {@code ttl}, no wait, exclusive, limit 1. */
    public static AcquireOptions ttl(Duration ttl) {
        return new AcquireOptions(ttl, Duration.ZERO, null, 1, "exclusive", Duration.ZERO, null);
    }

    public AcquireOptions withWait(Duration wait) {
        return new AcquireOptions(ttl, wait, holder, limit, mode, lockDelay, maxHold);
    }

    public AcquireOptions withHolder(String label) {
        return new AcquireOptions(ttl, waitFor, label, limit, mode, lockDelay, maxHold);
    }

    public AcquireOptions withLimit(int n) {
        return new AcquireOptions(ttl, waitFor, holder, n, mode, lockDelay, maxHold);
    }

    public AcquireOptions withMode(String m) {
        return new AcquireOptions(ttl, waitFor, holder, limit, m, lockDelay, maxHold);
    }

    public AcquireOptions withLockDelay(Duration d) {
        return new AcquireOptions(ttl, waitFor, holder, limit, mode, d, maxHold);
    }

    public AcquireOptions withMaxHold(Duration d) {
        return new AcquireOptions(ttl, waitFor, holder, limit, mode, lockDelay, d);
    }
}
