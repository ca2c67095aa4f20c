package io.leasehold.client;

import io.leasehold.client.Records.FieldError;
import java.util.List;

/**
 * The service refused the request as sent (a 4xx other than a lease outcome): nothing was applied,
 * and sending it again unchanged will not help. {@code invalid_request} names each field in
 * {@link #errors()}.
 */
public class RejectedException extends LeaseholdException {
    private static final long serialVersionUID = 1L;
    private final int status;
    private final String outcome;
    private final String detail;
    private final transient List<FieldError> errors;

    public RejectedException(int status, String outcome, String detail, List<FieldError> errors) {
        super("rejected by the service: " + status + " " + outcome + ": " + detail);
        this.status = status;
        this.outcome = outcome;
        this.detail = detail;
        this.errors = List.copyOf(errors);
    }

    public int status() {
        return status;
    }

    public String outcome() {
        return outcome;
    }

    public String detail() {
        return detail;
    }

    public List<FieldError> errors() {
        return errors;
    }
}
