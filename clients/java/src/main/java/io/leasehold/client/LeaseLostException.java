package io.leasehold.client;

/**
 * The lease no longer protects the work (LOST, UNKNOWN or RELEASED): stop it and stop presenting
 * the fencing token. {@code reason} is the service's word when a renew answered {@code lost}
 * ({@code absent}, {@code not_owner}, {@code revoked}, {@code max_hold}), else null.
 */
public class LeaseLostException extends LeaseholdException {
    private static final long serialVersionUID = 1L;
    private final LeaseState state;
    private final long fencingToken;
    private final String reason;

    public LeaseLostException(LeaseState state, long fencingToken, String reason, Throwable cause) {
        super("the lease (fencing token " + fencingToken + ") is " + state + (reason == null ? "" : " (" + reason + ")"),
                cause);
        this.state = state;
        this.fencingToken = fencingToken;
        this.reason = reason;
    }

    public LeaseState state() {
        return state;
    }

    public long fencingToken() {
        return fencingToken;
    }

    public String reason() {
        return reason;
    }
}
