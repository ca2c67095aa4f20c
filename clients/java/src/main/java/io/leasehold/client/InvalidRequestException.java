package io.leasehold.client;

import io.leasehold.client.Records.FieldError;
import java.util.List;

/** {@code invalid_request} (400/422): {@link #errors()} names each invalid field. */
public class InvalidRequestException extends RejectedException {
    private static final long serialVersionUID = 1L;

    public InvalidRequestException(int status, String outcome, String detail, List<FieldError> errors) {
        super(status, outcome, detail, errors);
    }
}
