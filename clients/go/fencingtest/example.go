// Package fencingtest holds the fencing example (a stale holder's write
// refused by PostgreSQL through the guard) and its test against a real
// PostgreSQL. It is a module of its own so that the client requires nothing.
package fencingtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// write records text for order-42 under the guard, in one transaction.
func write(ctx context.Context, db *sql.DB, token int64, text string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after a commit it is a no-op
	if err := leasehold.CheckFencingToken(ctx, tx, "fencing-demo/order-42", token); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx,
		`INSERT INTO demo_orders (id, note, token) VALUES ('order-42', $1, $2)
		 ON CONFLICT (id) DO UPDATE SET note = EXCLUDED.note, token = EXCLUDED.token`, text, token); err != nil {
		return err
	}
	return tx.Commit()
}

// RunExample: worker A takes the lease and stalls (no watchdog, as in a long
// GC pause) past its TTL; worker B, waiting, takes it over and writes; A
// wakes up and writes with its old token: PostgreSQL refuses it. It prints
// what happens and returns the stale write's error.
func RunExample(ctx context.Context, out io.Writer, url string, db *sql.DB) (error, error) {
	if _, err := db.ExecContext(ctx, leasehold.FenceTableDDL); err != nil {
		return nil, err
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS demo_orders (
		id text PRIMARY KEY, note text NOT NULL, token bigint NOT NULL)`); err != nil {
		return nil, err
	}
	client, err := leasehold.New(url, leasehold.Options{})
	if err != nil {
		return nil, err
	}
	res, err := leasehold.NewResource("fencing-demo", fmt.Sprintf("order-42-%d", time.Now().UnixNano()))
	if err != nil {
		return nil, err
	}
	a, _ := leasehold.NewAttempt("worker-a")
	held, err := client.Acquire(ctx, res, a, leasehold.AcquireOptions{TTL: 500 * time.Millisecond})
	if err != nil || !held.Held() {
		return nil, fmt.Errorf("worker A: %v %v", held.Outcome, err)
	}
	tokenA := held.Lease.FencingToken()
	fmt.Fprintf(out, "worker A: acquired, fencing token %d; pausing past its 500 ms TTL\n", tokenA)

	b, _ := leasehold.NewAttempt("worker-b")
	taken, err := client.Acquire(ctx, res, b, leasehold.AcquireOptions{TTL: 5 * time.Second, Wait: 5 * time.Second})
	if err != nil || !taken.Held() {
		return nil, fmt.Errorf("worker B: %v %v", taken.Outcome, err)
	}
	tokenB := taken.Lease.FencingToken()
	fmt.Fprintf(out, "worker B: acquired after waiting, fencing token %d\n", tokenB)
	if err := write(ctx, db, tokenB, "written by B"); err != nil {
		return nil, fmt.Errorf("worker B's write: %w", err)
	}
	fmt.Fprintf(out, "worker B: wrote order-42 with token %d\n", tokenB)

	fmt.Fprintf(out, "worker A: wakes up, lease state %s; writes anyway with token %d\n", held.Lease.State(), tokenA)
	stale := write(ctx, db, tokenA, "written by A")
	var st *leasehold.StaleFencingTokenError
	if errors.As(stale, &st) {
		fmt.Fprintf(out, "worker A: refused: %v\n", stale)
	} else {
		fmt.Fprintf(out, "worker A: NOT refused: %v\n", stale)
	}
	var note string
	var token int64
	if err := db.QueryRowContext(ctx, `SELECT note, token FROM demo_orders WHERE id = 'order-42'`).Scan(&note, &token); err != nil {
		return stale, err
	}
	fmt.Fprintf(out, "order-42 holds %q (token %d)\n", note, token)
	if _, err := taken.Lease.Release(ctx); err != nil {
		return stale, err
	}
	return stale, nil
}
