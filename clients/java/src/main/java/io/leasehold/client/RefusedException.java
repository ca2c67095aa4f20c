package io.leasehold.client;

/** Refused locally, without a request, because the lease handle is terminal (DESIGN §3.6). */
public class RefusedException extends LeaseholdException {
    private static final long serialVersionUID = 1L;
    private final LeaseState state;

    public RefusedException(LeaseState state) {
        super("refused locally: the lease handle is " + state);
        this.state = state;
    }

    public LeaseState state() {
        return state;
    }
}
