import io.leasehold.client.AcquireOptions;
import io.leasehold.client.Attempt;
import io.leasehold.client.LeaseholdClient;
import io.leasehold.client.Names;
import io.leasehold.client.Outcomes.Acquired;
import io.leasehold.client.fencing.PostgresFencing;
import io.leasehold.client.fencing.StaleFencingTokenException;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.time.Duration;

/**
 * A holder that paused past its lease writes after a newer holder did: PostgreSQL itself refuses it.
 * LEASEHOLD_PG_URL: a JDBC URL (default jdbc:postgresql://127.0.0.1:5432/postgres?user=postgres).
 */
public final class FencingPostgres {
    private FencingPostgres() {}

    static void write(Connection db, String who, long token, String body) throws SQLException {
        db.setAutoCommit(false);
        try {
            PostgresFencing.check(db, "invoice-export/inv-9", token); // first, in the same transaction
            try (var st = db.prepareStatement("UPDATE invoices SET body = ? WHERE id = 'inv-9'")) {
                st.setString(1, body);
                st.executeUpdate();
            }
            db.commit();
            System.out.println(who + " (token " + token + "): wrote \"" + body + "\"");
        } catch (StaleFencingTokenException e) {
            db.rollback();
            System.out.println(who + " (token " + token + "): refused by PostgreSQL: " + e.getMessage());
        }
    }

    public static void main(String[] args) throws Exception {
        String url = System.getenv().getOrDefault("LEASEHOLD_URL", "http://127.0.0.1:8080");
        String pg = System.getenv().getOrDefault("LEASEHOLD_PG_URL",
                "jdbc:postgresql://127.0.0.1:5432/postgres?user=postgres");
        LeaseholdClient client = LeaseholdClient.builder(url).build();
        String digest = Names.digest("inv-9");
        try (Connection db = DriverManager.getConnection(pg); var st = db.createStatement()) {
            st.execute(PostgresFencing.TABLE_DDL);
            st.execute("CREATE TABLE IF NOT EXISTS invoices (id text PRIMARY KEY, body text)");
            st.execute("INSERT INTO invoices VALUES ('inv-9', 'draft') ON CONFLICT DO NOTHING");

            // The old holder takes a short lease, then "pauses" (a GC, a frozen VM) past it.
            Acquired old = (Acquired) client.acquire("invoice-export", digest, Attempt.generate("old-holder"),
                    AcquireOptions.ttl(Duration.ofMillis(200)));
            // A new holder gets it once it expired (waiting server-side), and writes.
            Acquired fresh = (Acquired) client.acquire("invoice-export", digest, Attempt.generate("new-holder"),
                    AcquireOptions.ttl(Duration.ofSeconds(30)).withWait(Duration.ofSeconds(5)));
            write(db, "new holder", fresh.lease().fencingToken(), "final");
            // The old holder wakes up and, not checking its lease, writes: the guard refuses.
            System.out.println("old holder's lease: " + old.lease().state());
            write(db, "old holder", old.lease().fencingToken(), "stale");
            try (var rs = st.executeQuery("SELECT body FROM invoices WHERE id = 'inv-9'")) {
                rs.next();
                System.out.println("invoices.inv-9 = " + rs.getString(1));
            }
            fresh.lease().release();
        }
    }
}
