package io.leasehold.client;

import java.security.SecureRandom;
import java.util.Base64;
import java.util.UUID;

/**
 * An owner token with an operation id, made <em>before</em> the first acquire is sent (DESIGN §1):
 * a retry with the same attempt after a lost reply is answered {@code replayed_same_operation}
 * instead of taking a second lease. The owner token is a bearer secret: {@link #toString()}
 * redacts it.
 */
public record Attempt(String ownerToken, String operationId) {
    private static final SecureRandom RANDOM = new SecureRandom();

    public Attempt {
        if (ownerToken == null || !Names.OWNER_TOKEN.matcher(ownerToken).matches()) {
            throw new IllegalArgumentException("owner token must be 32 characters of base64url");
        }
        Names.checkOperationId(operationId);
    }

    /** A fresh attempt made locally: 24 bytes from the OS CSPRNG, base64url without padding. */
    public static Attempt generate(String operationId) {
        byte[] bytes = new byte[24];
        RANDOM.nextBytes(bytes);
        return new Attempt(Base64.getUrlEncoder().withoutPadding().encodeToString(bytes), operationId);
    }

    /** A fresh attempt with a random operation id {@code prefix-<uuid>}. */
    public static Attempt generateWithPrefix(String prefix) {
        return generate(prefix + "-" + UUID.randomUUID().toString().replace("-", ""));
    }

    @Override
    public String toString() {
        return "Attempt[ownerToken=<redacted>, operationId=" + operationId + "]";
    }
}
