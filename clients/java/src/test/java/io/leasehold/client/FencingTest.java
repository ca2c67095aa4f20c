package io.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.leasehold.client.Outcomes.Acquired;
import io.leasehold.client.fencing.PostgresFencing;
import io.leasehold.client.fencing.StaleFencingTokenException;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.UUID;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** The JDBC guard against a real PostgreSQL started privately on a free loopback port (DESIGN §16). */
class FencingTest {
    static Harness.Postgres pg;
    static Harness.Service service;

    @BeforeAll
    static void start() throws SQLException {
        pg = new Harness.Postgres();
        service = new Harness.Service(null);
        try (Connection c = connect(); Statement st = c.createStatement()) {
            st.execute(PostgresFencing.TABLE_DDL);
            st.execute("CREATE TABLE invoices (customer text PRIMARY KEY, total bigint NOT NULL, token bigint)");
        }
    }

    @AfterAll
    static void stop() {
        if (service != null) {
            service.close();
        }
        if (pg != null) {
            pg.close();
        }
    }

    static Connection connect() throws SQLException {
        return DriverManager.getConnection(pg.jdbcUrl());
    }

    /** One guarded write: the guard and the protected update in one transaction. */
    static void write(String customer, long token, long total) throws SQLException {
        try (Connection c = connect()) {
            c.setAutoCommit(false);
            try {
                PostgresFencing.check(c, "invoice/" + customer, token);
                try (var st = c.prepareStatement("INSERT INTO invoices VALUES (?, ?, ?) "
                        + "ON CONFLICT (customer) DO UPDATE SET total = EXCLUDED.total, token = EXCLUDED.token")) {
                    st.setString(1, customer);
                    st.setLong(2, total);
                    st.setLong(3, token);
                    st.executeUpdate();
                }
                c.commit();
            } catch (SQLException | RuntimeException e) {
                c.rollback();
                throw e;
            }
        }
    }

    static long total(String customer) throws SQLException {
        try (Connection c = connect(); var st = c.prepareStatement("SELECT total FROM invoices WHERE customer = ?")) {
            st.setString(1, customer);
            try (ResultSet rs = st.executeQuery()) {
                assertTrue(rs.next());
                return rs.getLong(1);
            }
        }
    }

    @Test
    void aStaleTokensWriteIsRefusedByPostgres() throws SQLException {
        String customer = "c-" + UUID.randomUUID();
        LeaseholdClient client = LeaseholdClient.builder(service.url).build();
        String digest = Names.digest(customer);
        // Two real holders in turn: the first's lease expires, the second takes it with a higher token.
        Acquired old = (Acquired) client.acquire("java-fencing", digest, Attempt.generate("op-old"),
                AcquireOptions.ttl(Duration.ofMillis(100)));
        Acquired fresh = (Acquired) client.acquire("java-fencing", digest, Attempt.generate("op-new"),
                AcquireOptions.ttl(Duration.ofSeconds(5)).withWait(Duration.ofSeconds(5)));
        assertTrue(fresh.lease().fencingToken() > old.lease().fencingToken());
        write(customer, fresh.lease().fencingToken(), 200);
        StaleFencingTokenException e = assertThrows(StaleFencingTokenException.class,
                () -> write(customer, old.lease().fencingToken(), 100));
        assertEquals(fresh.lease().fencingToken(), e.current());
        assertEquals(200, total(customer), "the stale holder's write never landed");
        write(customer, fresh.lease().fencingToken(), 300); // the same holder writes again
        assertEquals(300, total(customer));
        fresh.lease().release();
    }

    @Test
    void theGuardWantsATransactionAndAPlainTableName() throws SQLException {
        try (Connection c = connect()) {
            assertThrows(IllegalStateException.class, () -> PostgresFencing.check(c, "r", 1));
        }
        assertThrows(IllegalArgumentException.class, () -> PostgresFencing.fenceSql("x; DROP TABLE y"));
    }
}
