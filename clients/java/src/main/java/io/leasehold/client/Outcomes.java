package io.leasehold.client;

import io.leasehold.client.Records.LeaseRecord;

/**
 * The typed outcomes of each verb. What is not an outcome (the service unavailable, overloaded,
 * an indeterminate answer, a rejected request) is a {@link LeaseholdException}.
 */
public final class Outcomes {
    private Outcomes() {}

    /** What an acquire answers. */
    public sealed interface AcquireOutcome permits Held, Contended, OwnerOperationConflict, LimitMismatch {
        /** The wire name of the outcome. */
        String outcome();
    }

    /** What an acquire answers when the caller holds the lease: {@code acquired} or {@code replayed_same_operation}. */
    public sealed interface Held extends AcquireOutcome permits Acquired, Replayed {
        /** The handle that owns the lease now. */
        Lease lease();

        LeaseRecord record();
    }

    /** {@code acquired} (201): the caller holds it; {@code waitedMs} when it waited (else null). */
    public record Acquired(LeaseRecord record, Lease lease, Long waitedMs) implements Held {
        public String outcome() {
            return "acquired";
        }
    }

    /** {@code replayed_same_operation} (200): this attempt already held it; the TTL was not extended. */
    public record Replayed(LeaseRecord record, Lease lease) implements Held {
        public String outcome() {
            return "replayed_same_operation";
        }
    }

    /** {@code contended} (409): someone else holds it; ask again after {@code retryAfterMs}. */
    public record Contended(long retryAfterMs, Long waitedMs, String reason) implements AcquireOutcome {
        public String outcome() {
            return "contended";
        }
    }

    /** {@code owner_operation_conflict} (409): this owner token holds it for another operation. */
    public record OwnerOperationConflict(long retryAfterMs) implements AcquireOutcome {
        public String outcome() {
            return "owner_operation_conflict";
        }
    }

    /** {@code limit_mismatch} (409): the live holders agreed on another {@code limit}. */
    public record LimitMismatch(int limit) implements AcquireOutcome {
        public String outcome() {
            return "limit_mismatch";
        }
    }

    /** What a renew answers. */
    public sealed interface RenewOutcome permits Renewed, Lost {
        String outcome();
    }

    /** {@code renewed} (200): a new {@code remainingMs}, the same fencing token. */
    public record Renewed(LeaseRecord record) implements RenewOutcome {
        public String outcome() {
            return "renewed";
        }
    }

    /** {@code lost}: {@code reason} is {@code absent}, {@code not_owner}, {@code revoked} or {@code max_hold}. */
    public record Lost(String reason) implements RenewOutcome {
        public String outcome() {
            return "lost";
        }
    }

    /** What a release answers. */
    public sealed interface ReleaseOutcome permits Released, AlreadyAbsent, NotOwner {
        String outcome();
    }

    /** {@code released} (200). */
    public record Released() implements ReleaseOutcome {
        public String outcome() {
            return "released";
        }
    }

    /** {@code already_absent} (200): nothing to release; {@code reason} {@code revoked}, {@code max_hold} or null. */
    public record AlreadyAbsent(String reason) implements ReleaseOutcome {
        public String outcome() {
            return "already_absent";
        }
    }

    /** {@code not_owner} (409): someone else holds it; nothing was released. */
    public record NotOwner() implements ReleaseOutcome {
        public String outcome() {
            return "not_owner";
        }
    }
}
