package io.leasehold.client;

/** {@link Election#proclaim} when not leading, or when the lease turned out to be gone. */
public class NotLeaderException extends LeaseholdException {
    private static final long serialVersionUID = 1L;

    public NotLeaderException(String message) {
        super(message);
    }
}
