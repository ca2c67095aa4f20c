package leasehold_test

// Real parts for the tests: the service binary, a private redis-server, and
// an HTTP-aware TCP proxy that can drop a reply. Nothing here sleeps to
// synchronise: each start polls for the part to answer, bounded by a deadline.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func repoRoot(t testing.TB) string {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func serviceBinary(t testing.TB) string {
	path := os.Getenv("LEASEHOLD_BIN")
	if path == "" {
		path = filepath.Join(repoRoot(t), "target", "debug", "leasehold")
	}
	if st, err := os.Stat(path); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		t.Fatalf("the leasehold service binary is missing at %s: build it with `cargo build --bin leasehold` "+
			"at the repository root, or point LEASEHOLD_BIN at a built binary", path)
	}
	return path
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func waitUntil(t testing.TB, timeout time.Duration, what string, ready func() bool) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if ready() {
			return
		}
		time.Sleep(20 * time.Millisecond) // a poll interval, bounded by the deadline
	}
	t.Fatalf("%s not ready within %v", what, timeout)
}

type redisServer struct {
	port int
	cmd  *exec.Cmd
}

func (r *redisServer) url() string { return fmt.Sprintf("redis://127.0.0.1:%d", r.port) }

func (r *redisServer) freeze() { _ = r.cmd.Process.Signal(syscall.SIGSTOP) }
func (r *redisServer) thaw()   { _ = r.cmd.Process.Signal(syscall.SIGCONT) }

func (r *redisServer) cli(t testing.TB, args ...string) string {
	out, err := exec.Command("redis-cli", append([]string{"-p", strconv.Itoa(r.port)}, args...)...).Output()
	if err != nil {
		t.Fatalf("redis-cli %v: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}

func (r *redisServer) stop() {
	r.thaw()
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
}

func startRedis(t testing.TB) *redisServer {
	exe, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server is not installed (apt-get install redis-server)")
	}
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatal("redis-cli is not installed (apt-get install redis-tools)")
	}
	port := freePort(t)
	cmd := exec.Command(exe, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &redisServer{port: port, cmd: cmd}
	t.Cleanup(r.stop)
	waitUntil(t, 10*time.Second, "redis-server", func() bool {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 200*time.Millisecond)
		if err != nil {
			return false
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(200 * time.Millisecond))
		_, _ = c.Write([]byte("PING\r\n"))
		buf := make([]byte, 16)
		n, _ := c.Read(buf)
		return bytes.HasPrefix(buf[:n], []byte("+PONG"))
	})
	return r
}

type service struct {
	url       string
	port      int
	namespace string
	redis     *redisServer
	cmd       *exec.Cmd
}

// leaseKey is the Redis key of a resource's lease record (docs/decisions/storage-v2.md).
func (s *service) leaseKey(purpose, digest string) string {
	return fmt.Sprintf("%s:lease:v2:{%s:%s}", s.namespace, purpose, digest)
}

func startService(t testing.TB, redis *redisServer) *service {
	return launchService(t, redis, nil, "http", &http.Client{Timeout: 500 * time.Millisecond})
}

// launchService starts the binary with extra environment, and waits for its
// /readyz through probe (an HTTPS client trusting its CA, say).
func launchService(t testing.TB, redis *redisServer, extra []string, scheme string, probe *http.Client) *service {
	binary := serviceBinary(t)
	port := freePort(t)
	ns := fmt.Sprintf("g%d", time.Now().UnixNano()%1_000_000_000_000)
	cmd := exec.Command(binary, "serve")
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEASEHOLD_") || strings.HasPrefix(kv, "LEASEHOLD_BIN=") {
			env = append(env, kv)
		}
	}
	env = append(env,
		fmt.Sprintf("LEASEHOLD_LISTEN=127.0.0.1:%d", port),
		"LEASEHOLD_NAMESPACE="+ns,
		"LEASEHOLD_WORKER_THREADS=2",
		"RUST_LOG="+envOr("TEST_LOG", "warn"),
	)
	if redis != nil {
		env = append(env, "LEASEHOLD_REDIS_URL="+redis.url())
	}
	env = append(env, extra...)
	cmd.Env = env
	logFile, err := os.CreateTemp("", "leasehold-go-*.log")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s := &service{url: fmt.Sprintf("%s://127.0.0.1:%d", scheme, port), port: port, namespace: ns, redis: redis, cmd: cmd}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		logFile.Close()
		os.Remove(logFile.Name())
	})
	waitUntil(t, 20*time.Second, "leasehold", func() bool {
		select {
		case <-exited:
			text, _ := os.ReadFile(logFile.Name())
			t.Fatalf("leasehold exited: %s", text)
		default:
		}
		resp, err := probe.Get(s.url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return s
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

// ---------------------------------------------------------------- the proxy --

type seenRequest struct {
	method, path, ownerToken, operationID, lastEventID string
	dropped                                            bool
}

// proxy sits between a client and the service: it relays HTTP/1.1 exchanges
// one at a time per connection, records every request, and can drop the
// reply to the next N requests of a method (the request reaches the service
// and is answered; the client's connection is closed instead of relaying it).
type proxy struct {
	upstream string
	ln       net.Listener
	url      string
	mu       sync.Mutex
	seen     []seenRequest
	drop     map[string]int
	conns    map[net.Conn]bool
	closed   bool
}

func startProxy(t testing.TB, upstreamPort int) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{
		upstream: fmt.Sprintf("127.0.0.1:%d", upstreamPort),
		ln:       ln,
		url:      "http://" + ln.Addr().String(),
		drop:     map[string]int{},
		conns:    map[net.Conn]bool{},
	}
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) dropReplies(method string, times int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drop[method] += times
}

func (p *proxy) requests(method, prefix string) []seenRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []seenRequest
	for _, r := range p.seen {
		if r.method == method && strings.HasPrefix(r.path, prefix) {
			out = append(out, r)
		}
	}
	return out
}

// cut closes every open connection (the listener stays).
func (p *proxy) cut() {
	p.mu.Lock()
	conns := p.conns
	p.conns = map[net.Conn]bool{}
	p.mu.Unlock()
	for c := range conns {
		c.Close()
	}
}

func (p *proxy) close() {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.conns = map[net.Conn]bool{}
	p.mu.Unlock()
	p.ln.Close()
	for c := range conns {
		c.Close()
	}
}

func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = true
	return true
}

func (p *proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(c)
	}
}

func (p *proxy) serve(client net.Conn) {
	defer client.Close()
	up, err := net.Dial("tcp", p.upstream)
	if err != nil {
		return
	}
	defer up.Close()
	if !p.track(client) || !p.track(up) {
		return
	}
	cr, ur := bufio.NewReader(client), bufio.NewReader(up)
	for {
		req, err := http.ReadRequest(cr)
		if err != nil {
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return
		}
		seen := seenRequest{
			method: req.Method, path: req.URL.RequestURI(),
			ownerToken: req.Header.Get("Lease-Owner-Token"), operationID: req.Header.Get("Lease-Operation-Id"),
			lastEventID: req.Header.Get("Last-Event-ID"),
		}
		p.mu.Lock()
		if p.drop[req.Method] > 0 {
			p.drop[req.Method]--
			seen.dropped = true
		}
		p.seen = append(p.seen, seen)
		p.mu.Unlock()
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		if err := req.Write(up); err != nil {
			return
		}
		resp, err := http.ReadResponse(ur, req)
		if err != nil {
			return
		}
		if seen.dropped {
			// The answer came and goes nowhere: cut the client off.
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return
		}
		err = resp.Write(client)
		resp.Body.Close()
		if err != nil || resp.Close {
			return
		}
	}
}
