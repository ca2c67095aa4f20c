package io.leasehold.client;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.regex.Pattern;

/** The names the service accepts (DESIGN §1), checked before anything is sent. */
public final class Names {
    static final Pattern PURPOSE = Pattern.compile("^[a-z][a-z0-9-]{0,62}$");
    static final Pattern DIGEST = Pattern.compile("^v1\\.[0-9a-f]{64}$");
    static final Pattern OPERATION_ID = Pattern.compile("^[A-Za-z0-9._~-]{1,128}$");
    static final Pattern OWNER_TOKEN = Pattern.compile("^[A-Za-z0-9_-]{32}$");

    private Names() {}

    /** The resource digest of a raw id: {@code v1.} + SHA-256 hex; the service never sees raw ids. */
    public static String digest(String rawId) {
        try {
            byte[] hash = MessageDigest.getInstance("SHA-256").digest(rawId.getBytes(StandardCharsets.UTF_8));
            StringBuilder out = new StringBuilder("v1.");
            for (byte b : hash) {
                out.append(Character.forDigit((b >> 4) & 0xf, 16)).append(Character.forDigit(b & 0xf, 16));
            }
            return out.toString();
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("every Java platform has SHA-256", e);
        }
    }

    /** {@code purpose} if it matches {@code ^[a-z][a-z0-9-]{0,62}$}, else IllegalArgumentException. */
    public static String checkPurpose(String purpose) {
        if (purpose == null || !PURPOSE.matcher(purpose).matches()) {
            throw new IllegalArgumentException("purpose " + purpose + " must match " + PURPOSE.pattern());
        }
        return purpose;
    }

    /** {@code digest} if it is {@code v1.<64 hex>}, else IllegalArgumentException. */
    public static String checkDigest(String digest) {
        if (digest == null || !DIGEST.matcher(digest).matches()) {
            throw new IllegalArgumentException("digest " + digest + " must match " + DIGEST.pattern());
        }
        return digest;
    }

    /** {@code id} if it is 1-128 characters of {@code [A-Za-z0-9._~-]}. */
    public static String checkOperationId(String id) {
        if (id == null || !OPERATION_ID.matcher(id).matches()) {
            throw new IllegalArgumentException("operation id " + id + " must match " + OPERATION_ID.pattern());
        }
        return id;
    }

    /** A public holder label: 1-256 characters without control characters (DESIGN §9). */
    public static String checkHolder(String holder) {
        if (holder == null || holder.isEmpty() || holder.length() > 256
                || holder.chars().anyMatch(c -> c < 0x20 || (c >= 0x7f && c < 0xa0))) {
            throw new IllegalArgumentException("holder must be 1-256 characters without control characters");
        }
        return holder;
    }
}
