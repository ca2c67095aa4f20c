package io.leasehold.client;

import java.time.Duration;
import java.util.function.Consumer;

/**
 * Options of {@link LeaseholdClient#lock}: the {@code acquire} options; how long an uncertain or
 * refused acquire is retried with the same attempt ({@code retryBudget}, default 5 s); how long
 * before local validity ends the work is stopped when no renew landed ({@code stopMargin}, null:
 * TTL/10, at least one drift); whether the thread that locked is interrupted on loss
 * ({@code interrupt}, default true); an {@code onLost} listener (may be null); the
 * {@code operationId} (null: a random {@code lock-<uuid>}).
 */
public record LockOptions(AcquireOptions acquire, Duration retryBudget, Duration stopMargin, boolean interrupt,
        Consumer<Lease> onLost, String operationId) {
    public LockOptions {
        if (acquire == null) {
            throw new IllegalArgumentException("acquire options are required");
        }
        if (retryBudget == null || retryBudget.isNegative()) {
            throw new IllegalArgumentException("retryBudget must not be negative");
        }
        if (operationId != null) {
            Names.checkOperationId(operationId);
        }
    }

    /** A lock of {@code ttl}: no wait, 5 s retry budget, interrupting on loss. */
    public static LockOptions ttl(Duration ttl) {
        return new LockOptions(AcquireOptions.ttl(ttl), Duration.ofSeconds(5), null, true, null, null);
    }

    public LockOptions withWait(Duration wait) {
        return new LockOptions(acquire.withWait(wait), retryBudget, stopMargin, interrupt, onLost, operationId);
    }

    public LockOptions withHolder(String holder) {
        return new LockOptions(acquire.withHolder(holder), retryBudget, stopMargin, interrupt, onLost, operationId);
    }

    public LockOptions withAcquire(AcquireOptions a) {
        return new LockOptions(a, retryBudget, stopMargin, interrupt, onLost, operationId);
    }

    public LockOptions withRetryBudget(Duration d) {
        return new LockOptions(acquire, d, stopMargin, interrupt, onLost, operationId);
    }

    public LockOptions withStopMargin(Duration d) {
        return new LockOptions(acquire, retryBudget, d, interrupt, onLost, operationId);
    }

    public LockOptions withInterrupt(boolean on) {
        return new LockOptions(acquire, retryBudget, stopMargin, on, onLost, operationId);
    }

    public LockOptions withOnLost(Consumer<Lease> listener) {
        return new LockOptions(acquire, retryBudget, stopMargin, interrupt, listener, operationId);
    }

    public LockOptions withOperationId(String id) {
        return new LockOptions(acquire, retryBudget, stopMargin, interrupt, onLost, id);
    }
}
