// Command lock does fenced work under a lease kept by a watchdog:
//
//	go run ./examples/lock http://127.0.0.1:8080 order-42 3
//
// It takes the lease on invoice-export/<raw id> (TTL 1 s, waiting up to 5 s
// for another holder), does one step every 400 ms (longer than the TTL in
// all: the watchdog renews), stops at once if the lease is lost, and
// releases when done.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: lock URL RAW_ID STEPS")
		os.Exit(2)
	}
	steps, err := strconv.Atoi(os.Args[3])
	if err != nil {
		fmt.Fprintln(os.Stderr, "STEPS must be a number")
		os.Exit(2)
	}
	client, err := leasehold.New(os.Args[1], leasehold.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx := context.Background()
	opts := leasehold.LockOptions{TTL: time.Second, Wait: 5 * time.Second, Holder: "go-example"}
	err = client.WithLock(ctx, "invoice-export", os.Args[2], opts, func(ctx context.Context) error {
		lease := leasehold.LeaseFrom(ctx)
		fmt.Printf("locked: fencing token %d, valid for %v (drift %v)\n",
			lease.FencingToken(), lease.ValidFor().Round(time.Millisecond), lease.Drift())
		for i := 1; i <= steps; i++ {
			select {
			case <-ctx.Done(): // lost, or about to expire unrenewed: stop now
				return fmt.Errorf("stopped at step %d: %w", i, lease.Check())
			case <-time.After(400 * time.Millisecond):
			}
			fmt.Printf("step %d of %d with fencing token %d (valid for %v)\n",
				i, steps, lease.FencingToken(), lease.ValidFor().Round(time.Millisecond))
		}
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "lock:", err)
		os.Exit(1)
	}
	res, _ := leasehold.NewResource("invoice-export", os.Args[2])
	in, err := client.Inspect(ctx, res, leasehold.InspectOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("released: held=%v\n", in.Held)
}
