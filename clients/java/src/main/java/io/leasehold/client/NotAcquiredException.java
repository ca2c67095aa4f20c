package io.leasehold.client;

import io.leasehold.client.Outcomes.AcquireOutcome;

/** {@code lock} did not get the lease within its wait; {@link #outcome()} is the last answer. */
public class NotAcquiredException extends LeaseholdException {
    private static final long serialVersionUID = 1L;
    private final transient AcquireOutcome outcome;

    public NotAcquiredException(AcquireOutcome outcome) {
        super("not acquired: " + outcome.outcome());
        this.outcome = outcome;
    }

    public AcquireOutcome outcome() {
        return outcome;
    }
}
