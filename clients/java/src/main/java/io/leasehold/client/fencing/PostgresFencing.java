package io.leasehold.client.fencing;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.regex.Pattern;

/**
 * Fencing at the resource for PostgreSQL over JDBC (DESIGN §16): inside the caller's transaction,
 * {@link #check} records the highest token seen per resource and throws
 * {@link StaleFencingTokenException} when a newer holder has already written. Create the table once
 * ({@link #TABLE_DDL}) and guard every write of the protected work in the same transaction:
 *
 * <pre>{@code
 * conn.setAutoCommit(false);
 * PostgresFencing.check(conn, "invoice-export/customer-42", lease.fencingToken());
 * try (var st = conn.prepareStatement("UPDATE invoices SET ... WHERE customer = ?")) { ... }
 * conn.commit();
 * }</pre>
 *
 * The guard is one statement, {@code INSERT … ON CONFLICT (resource) DO UPDATE … WHERE
 * stored.token <= EXCLUDED.token RETURNING token}: a row comes back when this token is the highest
 * seen (or equal: the same holder writing again); none when a newer holder has written. The row
 * stays locked until the transaction ends, so an older holder's transaction and a newer one's are
 * serialised on it.
 */
public final class PostgresFencing {
    /** The table the guard writes (as the Python and TypeScript guards). */
    public static final String TABLE_DDL = "CREATE TABLE IF NOT EXISTS leasehold_fence (\n"
            + "    resource   text        PRIMARY KEY,\n"
            + "    token      bigint      NOT NULL CHECK (token > 0),\n"
            + "    updated_at timestamptz NOT NULL DEFAULT now()\n"
            + ")";
    private static final Pattern TABLE = Pattern.compile("^[a-z_][a-z0-9_]{0,62}(\\.[a-z_][a-z0-9_]{0,62})?$");

    private PostgresFencing() {}

    /** The guard statement for {@code table} (parameters: resource, token). */
    public static String fenceSql(String table) {
        checkTable(table);
        String bare = table.substring(table.lastIndexOf('.') + 1);
        return "INSERT INTO " + table + " (resource, token) VALUES (?, ?) "
                + "ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now() "
                + "WHERE " + bare + ".token <= EXCLUDED.token RETURNING token";
    }

    private static void checkTable(String table) {
        if (table == null || !TABLE.matcher(table).matches()) {
            throw new IllegalArgumentException("table " + table + " must be a plain (optionally schema-qualified) name");
        }
    }

    /** {@link #check(Connection, String, long, String)} on {@code leasehold_fence}. */
    public static void check(Connection conn, String resource, long token) throws SQLException {
        check(conn, resource, token, "leasehold_fence");
    }

    /**
     * Records {@code token} as the highest seen for {@code resource} inside the caller's open transaction
     * on {@code conn} (auto-commit off), or throws {@link StaleFencingTokenException} when a newer token
     * has been recorded. Commit or roll back as usual: the record and the protected writes land
     * together or not at all.
     */
    public static void check(Connection conn, String resource, long token, String table) throws SQLException {
        if (resource == null || resource.isEmpty()) {
            throw new IllegalArgumentException("resource must not be empty");
        }
        if (token <= 0) {
            throw new IllegalArgumentException("token must be positive (a lease's fencing token)");
        }
        if (conn.getAutoCommit()) {
            throw new IllegalStateException("the guard belongs inside the caller's transaction: turn auto-commit off");
        }
        try (PreparedStatement st = conn.prepareStatement(fenceSql(table))) {
            st.setString(1, resource);
            st.setLong(2, token);
            try (ResultSet rs = st.executeQuery()) {
                if (rs.next()) {
                    return;
                }
            }
        }
        Long current = null;
        try (PreparedStatement st = conn.prepareStatement("SELECT token FROM " + table + " WHERE resource = ?")) {
            st.setString(1, resource);
            try (ResultSet rs = st.executeQuery()) {
                if (rs.next()) {
                    current = rs.getLong(1);
                }
            }
        }
        throw new StaleFencingTokenException(resource, token, current);
    }
}
