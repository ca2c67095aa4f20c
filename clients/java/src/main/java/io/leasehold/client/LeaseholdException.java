package io.leasehold.client;

/** Base of every error this library throws; unchecked, so it crosses lambdas and futures. */
public class LeaseholdException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public LeaseholdException(String message) {
        super(message);
    }

    public LeaseholdException(String message, Throwable cause) {
        super(message, cause);
    }

    /** Whether the request may have changed something: only {@link IndeterminateException}. */
    public boolean mayHaveApplied() {
        return false;
    }
}
