package io.leasehold.client;

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;

/**
 * Real parts for the tests: the service binary, a private redis-server, a private PostgreSQL and an
 * HTTP-aware TCP proxy that can drop replies. Starting a part waits for it to answer (readiness
 * polled at short intervals, bounded by a deadline); nothing sleeps to synchronise.
 */
final class Harness {
    static final Path REPO_ROOT = repoRoot();
    static final HttpClient HTTP = HttpClient.newBuilder().connectTimeout(Duration.ofMillis(500)).build();

    private Harness() {}

    private static Path repoRoot() {
        String prop = System.getProperty("leasehold.repo");
        Path p = Path.of(prop != null ? prop : ".").toAbsolutePath().normalize();
        while (p != null && !Files.exists(p.resolve("clients/conformance/scenarios.json"))) {
            p = p.getParent();
        }
        if (p == null) {
            throw new IllegalStateException("run the tests inside the leasehold repository (or set -Dleasehold.repo)");
        }
        return p;
    }

    /** A part the tests need is missing: never skipped, always a failure naming what to install. */
    static final class MissingPart extends RuntimeException {
        private static final long serialVersionUID = 1L;

        MissingPart(String m) {
            super(m);
        }
    }

    static Path serviceBinary() {
        String env = System.getenv("LEASEHOLD_BIN");
        Path p = env != null ? Path.of(env) : REPO_ROOT.resolve("target/debug/leasehold");
        if (!Files.isExecutable(p)) {
            throw new MissingPart("the leasehold service binary is missing at " + p
                    + ": build it with `cargo build --bin leasehold` at the repository root, or set LEASEHOLD_BIN");
        }
        return p;
    }

    static Path which(String name, String pkg) {
        for (String dir : System.getenv().getOrDefault("PATH", "").split(File.pathSeparator)) {
            Path p = Path.of(dir, name);
            if (Files.isExecutable(p)) {
                return p;
            }
        }
        throw new MissingPart(name + " is not installed (apt-get install " + pkg + ")");
    }

    static int freePort() {
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            return s.getLocalPort();
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
    }

    static void waitUntil(BooleanSupplier check, Duration timeout, String what) {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (System.nanoTime() < deadline) {
            if (check.getAsBoolean()) {
                return;
            }
            try {
                Thread.sleep(20); // readiness polling interval, bounded by the deadline
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException(e);
            }
        }
        throw new IllegalStateException(what + " not ready within " + timeout);
    }

    static String run(List<String> cmd) {
        try {
            Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
            byte[] out = p.getInputStream().readAllBytes();
            if (!p.waitFor(60, TimeUnit.SECONDS) || p.exitValue() != 0) {
                throw new IllegalStateException(cmd + " failed: " + new String(out, StandardCharsets.UTF_8));
            }
            return new String(out, StandardCharsets.UTF_8).trim();
        } catch (IOException e) {
            throw new IllegalStateException(cmd + ": " + e, e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    static void stopProcess(Process p) {
        if (!p.isAlive()) {
            return;
        }
        p.destroy();
        try {
            if (!p.waitFor(10, TimeUnit.SECONDS)) {
                p.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    static void signal(long pid, String sig) {
        run(List.of("kill", "-" + sig, Long.toString(pid)));
    }

    // -- redis ------------------------------------------------------------------------

    static final class Redis implements AutoCloseable {
        final int port;
        final Process proc;

        Redis() {
            Path exe = which("redis-server", "redis-server");
            port = freePort();
            try {
                proc = new ProcessBuilder(exe.toString(), "--port", Integer.toString(port), "--bind", "127.0.0.1",
                        "--save", "", "--appendonly", "no").redirectOutput(ProcessBuilder.Redirect.DISCARD)
                        .redirectError(ProcessBuilder.Redirect.DISCARD).start();
            } catch (IOException e) {
                throw new IllegalStateException(e);
            }
            try {
                waitUntil(this::pong, Duration.ofSeconds(10), "redis-server");
            } catch (RuntimeException e) {
                close();
                throw e;
            }
        }

        private boolean pong() {
            try (Socket s = new Socket()) {
                s.connect(new InetSocketAddress("127.0.0.1", port), 200);
                s.setSoTimeout(200);
                s.getOutputStream().write("PING\r\n".getBytes(StandardCharsets.US_ASCII));
                byte[] b = new byte[5];
                return s.getInputStream().readNBytes(b, 0, 5) == 5 && new String(b, StandardCharsets.US_ASCII).equals("+PONG");
            } catch (IOException e) {
                return false;
            }
        }

        String url() {
            return "redis://127.0.0.1:" + port;
        }

        String cli(String... args) {
            List<String> cmd = new ArrayList<>(List.of(which("redis-cli", "redis-tools").toString(), "-p",
                    Integer.toString(port)));
            cmd.addAll(List.of(args));
            return run(cmd);
        }

        void freeze() {
            signal(proc.pid(), "STOP");
        }

        void thaw() {
            signal(proc.pid(), "CONT");
        }

        @Override
        public void close() {
            if (proc.isAlive()) {
                thaw();
            }
            stopProcess(proc);
        }
    }

    // -- the service ------------------------------------------------------------------

    static final class Service implements AutoCloseable {
        final String url;
        final int port;
        final Process proc;
        final String namespace;
        final Redis redis;
        final Path log;

        Service(Redis redis) {
            this.redis = redis;
            this.port = freePort();
            this.url = "http://127.0.0.1:" + port;
            this.namespace = "t" + UUID.randomUUID().toString().replace("-", "").substring(0, 12);
            try {
                log = Files.createTempFile("leasehold-java-", ".log");
                ProcessBuilder pb = new ProcessBuilder(serviceBinary().toString(), "serve").redirectErrorStream(true)
                        .redirectOutput(log.toFile());
                Map<String, String> env = pb.environment();
                env.put("LEASEHOLD_LISTEN", "127.0.0.1:" + port);
                env.put("LEASEHOLD_NAMESPACE", namespace);
                env.put("LEASEHOLD_WORKER_THREADS", "2");
                env.put("RUST_LOG", System.getenv().getOrDefault("TEST_LOG", "warn"));
                env.remove("LEASEHOLD_REDIS_URL");
                if (redis != null) {
                    env.put("LEASEHOLD_REDIS_URL", redis.url());
                }
                proc = pb.start();
            } catch (IOException e) {
                throw new IllegalStateException(e);
            }
            try {
                waitUntil(this::ready, Duration.ofSeconds(20), "leasehold");
            } catch (RuntimeException e) {
                close();
                throw e;
            }
        }

        private boolean ready() {
            if (!proc.isAlive()) {
                String text;
                try {
                    text = Files.readString(log);
                } catch (IOException e) {
                    text = "";
                }
                throw new IllegalStateException("leasehold exited with " + proc.exitValue() + ": " + text);
            }
            try {
                HttpResponse<String> r = HTTP.send(HttpRequest.newBuilder(URI.create(url + "/readyz"))
                        .timeout(Duration.ofMillis(500)).build(), HttpResponse.BodyHandlers.ofString());
                return r.statusCode() == 200;
            } catch (IOException e) {
                return false;
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return false;
            }
        }

        String store() {
            return redis == null ? "memory" : "redis";
        }

        /** The Redis key of a resource's lease record (docs/storage-v2.md). */
        String leaseKey(String purpose, String digest) {
            return namespace + ":lease:v2:{" + purpose + ":" + digest + "}";
        }

        /** Waiters on this instance, from /readyz. */
        long waiters() {
            try {
                HttpResponse<String> r = HTTP.send(HttpRequest.newBuilder(URI.create(url + "/readyz"))
                        .timeout(Duration.ofSeconds(2)).build(), HttpResponse.BodyHandlers.ofString());
                return Wire.JSON.readTree(r.body()).path("waiters").asLong(0);
            } catch (IOException e) {
                return 0;
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return 0;
            }
        }

        @Override
        public void close() {
            stopProcess(proc);
        }
    }

    // -- the proxy --------------------------------------------------------------------

    record Seen(String method, String path, String ownerToken, String operationId, String lastEventId,
            boolean dropped) {}

    /**
     * Between a client and the service: relays HTTP/1.1 exchanges one at a time per connection and
     * records every request; can drop the reply to the next N requests of a method (the request reaches
     * the service and is answered; the client's connection is closed instead of relaying the answer).
     */
    static final class Proxy implements AutoCloseable {
        final int upstream;
        final ServerSocket listener;
        final String url;
        final List<Seen> seen = new ArrayList<>();
        private final Map<String, Integer> drop = new HashMap<>();
        private final Set<Socket> open = ConcurrentHashMap.newKeySet();
        private volatile boolean closed;

        Proxy(int upstream) {
            this.upstream = upstream;
            try {
                listener = new ServerSocket(0, 64, InetAddress.getLoopbackAddress());
            } catch (IOException e) {
                throw new IllegalStateException(e);
            }
            url = "http://127.0.0.1:" + listener.getLocalPort();
            Thread t = new Thread(this::accept, "proxy-accept");
            t.setDaemon(true);
            t.start();
        }

        synchronized void dropReplies(String method, int times) {
            drop.merge(method, times, Integer::sum);
        }

        synchronized List<Seen> acquires() {
            return seen.stream().filter(s -> s.method().equals("PUT") && s.path().startsWith("/leases/")).toList();
        }

        synchronized List<Seen> all() {
            return List.copyOf(seen);
        }

        private void accept() {
            while (!closed) {
                try {
                    Socket c = listener.accept();
                    Thread t = new Thread(() -> serve(c), "proxy-conn");
                    t.setDaemon(true);
                    t.start();
                } catch (IOException e) {
                    return;
                }
            }
        }

        private void serve(Socket client) {
            try (client; Socket up = new Socket(InetAddress.getLoopbackAddress(), upstream)) {
                open.add(client);
                open.add(up);
                if (closed) {
                    return;
                }
                InputStream cin = client.getInputStream();
                InputStream uin = up.getInputStream();
                while (true) {
                    String head = readHead(cin);
                    if (head == null) {
                        return;
                    }
                    String[] first = head.split(" ", 3);
                    int length = Integer.parseInt(header(head, "content-length", "0"));
                    byte[] body = cin.readNBytes(length);
                    boolean dropped;
                    synchronized (this) {
                        int left = drop.getOrDefault(first[0], 0);
                        dropped = left > 0;
                        if (dropped) {
                            drop.put(first[0], left - 1);
                        }
                        seen.add(new Seen(first[0], first[1], header(head, "lease-owner-token", null),
                                header(head, "lease-operation-id", null), header(head, "last-event-id", null), dropped));
                    }
                    OutputStream uout = up.getOutputStream();
                    uout.write(head.getBytes(StandardCharsets.ISO_8859_1));
                    uout.write(body);
                    uout.flush();
                    if (!response(uin, dropped ? null : client.getOutputStream()) || dropped) {
                        return; // dropped: the answer came and went nowhere; cut the client off
                    }
                }
            } catch (IOException e) {
                // a side closed: the exchange ends
            } finally {
                open.remove(client);
                open.removeIf(Socket::isClosed);
            }
        }

        private static String readHead(InputStream in) throws IOException {
            ByteArrayOutputStream buf = new ByteArrayOutputStream();
            int state = 0;
            while (state < 4) {
                int b = in.read();
                if (b < 0) {
                    return null;
                }
                buf.write(b);
                state = (b == '\r' && (state == 0 || state == 2)) || (b == '\n' && (state == 1 || state == 3))
                        ? state + 1 : (b == '\r' ? 1 : 0);
                if (buf.size() > 65536) {
                    throw new IOException("head too long");
                }
            }
            return buf.toString(StandardCharsets.ISO_8859_1);
        }

        private static String header(String head, String name, String dflt) {
            for (String line : head.split("\r\n")) {
                int c = line.indexOf(':');
                if (c > 0 && line.substring(0, c).trim().equalsIgnoreCase(name)) {
                    return line.substring(c + 1).trim();
                }
            }
            return dflt;
        }

        private static String readLine(InputStream in) throws IOException {
            ByteArrayOutputStream buf = new ByteArrayOutputStream();
            int prev = -1;
            while (true) {
                int b = in.read();
                if (b < 0) {
                    throw new IOException("closed mid-chunk");
                }
                buf.write(b);
                if (prev == '\r' && b == '\n') {
                    return buf.toString(StandardCharsets.ISO_8859_1);
                }
                prev = b;
            }
        }

        /** Reads one response, relaying it to {@code out} unless null; false when the connection must close. */
        private static boolean response(InputStream in, OutputStream out) throws IOException {
            String head = readHead(in);
            if (head == null) {
                return false;
            }
            OutputStream sink = out == null ? OutputStream.nullOutputStream() : out;
            sink.write(head.getBytes(StandardCharsets.ISO_8859_1));
            String length = header(head, "content-length", null);
            if (length != null) {
                sink.write(in.readNBytes(Integer.parseInt(length)));
            } else if ("chunked".equalsIgnoreCase(header(head, "transfer-encoding", ""))) {
                while (true) {
                    String line = readLine(in);
                    int size = Integer.parseInt(line.trim().split(";")[0], 16);
                    sink.write(line.getBytes(StandardCharsets.ISO_8859_1));
                    sink.write(in.readNBytes(size + 2));
                    sink.flush();
                    if (size == 0) {
                        break;
                    }
                }
            }
            sink.flush();
            return !"close".equalsIgnoreCase(header(head, "connection", ""));
        }

        /** Cuts every open connection (the listener stays: clients may reconnect). */
        void cut() {
            for (Socket s : open) {
                try {
                    s.close();
                } catch (IOException e) {
                    // already closed
                }
            }
        }

        @Override
        public void close() {
            closed = true;
            try {
                listener.close();
            } catch (IOException e) {
                // already closed
            }
            for (Socket s : open) {
                try {
                    s.close();
                } catch (IOException e) {
                    // already closed
                }
            }
        }
    }

    // -- PostgreSQL -------------------------------------------------------------------

    static final class Postgres implements AutoCloseable {
        final Path dir;
        final int port;
        final String runAs;
        final Path bin;

        Postgres() {
            String env = System.getenv("LEASEHOLD_PG_BIN");
            bin = Path.of(env != null ? env : "/usr/lib/postgresql/15/bin");
            if (!Files.isExecutable(bin.resolve("initdb"))) {
                throw new MissingPart("PostgreSQL is not installed at " + bin
                        + " (apt-get install postgresql, or set LEASEHOLD_PG_BIN to its bin directory)");
            }
            runAs = "root".equals(System.getProperty("user.name")) ? "postgres" : null;
            try {
                dir = Files.createTempDirectory("leasehold-java-pg-");
                if (runAs != null) {
                    run(List.of("chown", runAs, dir.toString()));
                }
            } catch (IOException e) {
                throw new IllegalStateException(e);
            }
            port = freePort();
            run(cmd(bin.resolve("initdb").toString(), "-D", dir.resolve("data").toString(), "-U", "postgres",
                    "--auth=trust", "-N"));
            run(cmd(bin.resolve("pg_ctl").toString(), "-D", dir.resolve("data").toString(), "-l",
                    dir.resolve("log").toString(), "-w", "-o",
                    "-p " + port + " -k " + dir + " -c listen_addresses='127.0.0.1' -c fsync=off", "start"));
        }

        private List<String> cmd(String... args) {
            List<String> out = new ArrayList<>();
            if (runAs != null) {
                out.addAll(List.of("runuser", "-u", runAs, "--"));
            }
            out.addAll(List.of(args));
            return out;
        }

        String jdbcUrl() {
            return "jdbc:postgresql://127.0.0.1:" + port + "/postgres?user=postgres";
        }

        @Override
        public void close() {
            try {
                run(cmd(bin.resolve("pg_ctl").toString(), "-D", dir.resolve("data").toString(), "-m", "immediate",
                        "stop"));
            } finally {
                run(List.of("rm", "-rf", dir.toString()));
            }
        }
    }
}
