package fencingtest

// The fencing guard against a real PostgreSQL, started privately on a free
// port (initdb + pg_ctl, as the postgres user when run as root), and the real
// service binary (embedded store).

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
	_ "github.com/lib/pq"
)

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func pgBin(t *testing.T) string {
	dir := os.Getenv("LEASEHOLD_PG_BIN")
	if dir == "" {
		found, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
		if len(found) > 0 {
			dir = found[len(found)-1]
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "initdb")); dir == "" || err != nil {
		t.Fatal("PostgreSQL is not installed (apt-get install postgresql, or set LEASEHOLD_PG_BIN to its bin directory)")
	}
	return dir
}

// startPostgres is a private cluster; it answers a DSN for lib/pq.
func startPostgres(t *testing.T) string {
	bin := pgBin(t)
	base, err := os.MkdirTemp("", "leasehold-go-pg-")
	if err != nil {
		t.Fatal(err)
	}
	var prefix []string
	if os.Geteuid() == 0 {
		prefix = []string{"runuser", "-u", "postgres", "--"}
		if err := exec.Command("chown", "postgres", base).Run(); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) {
		all := append(append([]string{}, prefix...), args...)
		if out, err := exec.Command(all[0], all[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	data := filepath.Join(base, "data")
	port := freePort(t)
	run(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "-N")
	run(filepath.Join(bin, "pg_ctl"), "-D", data, "-l", filepath.Join(base, "log"), "-w",
		"-o", fmt.Sprintf("-p %d -k %s -c listen_addresses='' -c fsync=off", port, base), "start")
	t.Cleanup(func() {
		all := append(append([]string{}, prefix...), filepath.Join(bin, "pg_ctl"), "-D", data, "-m", "immediate", "stop")
		_ = exec.Command(all[0], all[1:]...).Run()
		os.RemoveAll(base)
	})
	return fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable", base, port)
}

func startService(t *testing.T) string {
	binary := os.Getenv("LEASEHOLD_BIN")
	if binary == "" {
		root, _ := filepath.Abs("../../..")
		binary = filepath.Join(root, "target", "debug", "leasehold")
	}
	if _, err := os.Stat(binary); err != nil {
		t.Fatalf("the leasehold service binary is missing at %s: `cargo build --bin leasehold`, or set LEASEHOLD_BIN", binary)
	}
	port := freePort(t)
	cmd := exec.Command(binary, "serve")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEASEHOLD_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, fmt.Sprintf("LEASEHOLD_LISTEN=127.0.0.1:%d", port), "LEASEHOLD_WORKER_THREADS=2", "RUST_LOG=warn")
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return url
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("leasehold not ready: %s", log.String())
		}
		time.Sleep(20 * time.Millisecond) // a poll interval, bounded by the deadline
	}
}

func TestAStaleHoldersWriteIsRefusedByPostgres(t *testing.T) {
	dsn := startPostgres(t)
	url := startService(t)
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	stale, err := RunExample(ctx, &out, url, db)
	t.Logf("example output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	var st *leasehold.StaleFencingTokenError
	if !errors.Is(stale, leasehold.ErrStaleFencingToken) || !errors.As(stale, &st) || st.Current <= st.Token {
		t.Fatalf("the stale write was not refused: %v", stale)
	}
	if !strings.Contains(out.String(), `order-42 holds "written by B"`) {
		t.Fatalf("the stale write landed:\n%s", out.String())
	}
}

func TestTheGuardSerialisesAnOlderAndANewerTransaction(t *testing.T) {
	db, err := sql.Open("postgres", startPostgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, leasehold.FenceTableDDL); err != nil {
		t.Fatal(err)
	}
	// The same token again is accepted (one holder writing twice).
	for i := 0; i < 2; i++ {
		if err := leasehold.CheckFencingToken(ctx, db, "r", 10); err != nil {
			t.Fatalf("token 10, round %d: %v", i, err)
		}
	}
	// An older holder's transaction holds the row; a newer one waits for it,
	// then wins; the older one, once committed, had recorded nothing newer.
	older, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := leasehold.CheckFencingToken(ctx, older, "r", 11); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	newerDone := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			newerDone <- err
			return
		}
		if err := leasehold.CheckFencingToken(ctx, tx, "r", 12); err != nil {
			tx.Rollback()
			newerDone <- err
			return
		}
		newerDone <- tx.Commit()
	}()
	// The newer one is blocked on the row lock while the older is open:
	// PostgreSQL's own view of waiting backends says so.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the newer transaction never waited for the older one's row lock")
		}
		time.Sleep(10 * time.Millisecond) // a poll interval, bounded by the deadline
	}
	if err := older.Commit(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := <-newerDone; err != nil {
		t.Fatalf("newer: %v", err)
	}
	err = leasehold.CheckFencingToken(ctx, db, "r", 11)
	var st *leasehold.StaleFencingTokenError
	if !errors.As(err, &st) || st.Current != 12 || st.Token != 11 {
		t.Fatalf("token 11 after 12: %v", err)
	}
}
