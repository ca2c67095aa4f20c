// Command mixed-worker is a worker of the mixed checked history
// (tests/it/mixed_history.rs at the repository root): goroutines that take
// turns on shared resources with Client.Lock and write, as JSON lines, when
// each believed it held a lease. It speaks the protocol of
// clients/python/tests/mixed_worker.py:
//
//	mixed-worker OUT DURATION_MS TTL_MS NAME URL[,URL...] RAW_ID[,RAW_ID...] [TASKS]
//
// Each of TASKS goroutines (default 2), named NAME-<i>, runs rounds until
// DURATION_MS have passed: round r locks RAW_ID[(i + r/3) % n] through
// URL[(i + r) % m] (purpose "mixed"), works for a while (sometimes longer
// than the TTL: the watchdog renews), stopping early when the lock's context
// is cancelled, and writes one line per belief:
//
//	{"kind": "belief", "lang": "go", "worker": ..., "resource": RAW_ID, "url": URL,
//	 "token": fencing token, "sentMs": when Lock was called, "startMs": when the
//	 work began, "endMs": min(the loss signal, the work's end, before the
//	 release), "how": "acquired" | "replayed_same_operation", "ended":
//	 "released" | "lost" | "unknown" | "expiring"}
//
// and, when the goroutine is done, one {"kind": "summary", ...} line with its
// counts. Times are wall-clock milliseconds, the clock the other languages'
// workers use too.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

const purpose = "mixed"

func nowMs() float64 { return float64(time.Now().UnixNano()) / 1e6 }

// out writes one JSON line per record, from any goroutine.
type out struct {
	mu   sync.Mutex
	file *os.File
}

func (o *out) write(record map[string]any) {
	line, err := json.Marshal(record)
	if err != nil {
		panic(err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, err := o.file.Write(append(line, '\n')); err != nil {
		panic(err)
	}
}

func task(o *out, worker string, index int, stopAt float64, ttl time.Duration, urls, ids []string) {
	h := fnv.New64a()
	h.Write([]byte(worker))
	rng := rand.New(rand.NewSource(int64(h.Sum64())))
	counts := map[string]int{}
	rounds, beliefs := 0, 0
	clients := make([]*leasehold.Client, len(urls))
	for i, u := range urls {
		c, err := leasehold.New(u, leasehold.Options{Timeout: 2 * time.Second})
		if err != nil {
			panic(err)
		}
		clients[i] = c
	}
	for nowMs() < stopAt {
		rounds++
		urlIndex := (index + rounds) % len(urls)
		rawID := ids[(index+rounds/3)%len(ids)]
		var lostMu sync.Mutex
		var lostAt []float64
		sent := nowMs()
		lock, ctx, err := clients[urlIndex].Lock(context.Background(), purpose, rawID, leasehold.LockOptions{
			TTL: ttl, Wait: ttl / 2, RetryBudget: 2 * time.Second,
			OperationID: fmt.Sprintf("%s-%d", worker, rounds),
			OnLost: func(*leasehold.Lease) {
				at := nowMs()
				lostMu.Lock()
				lostAt = append(lostAt, at)
				lostMu.Unlock()
			},
		})
		if err != nil {
			var na *leasehold.NotAcquiredError
			var le *leasehold.Error
			switch {
			case errors.As(err, &na):
				counts["not acquired: "+na.Outcome.Outcome]++
			case errors.As(err, &le):
				counts["lock failed: "+strings.TrimPrefix(le.Kind.Error(), "leasehold: ")]++
			default:
				counts["lock failed: "+err.Error()]++
			}
			continue
		}
		start := nowMs()
		// The work: up to 1.5 TTL (the watchdog renews), stopping when told.
		work := time.Duration(50+rng.Int63n(int64(ttl*3/2/time.Millisecond))) * time.Millisecond
		timer := time.NewTimer(work)
		end := 0.0
		select {
		case <-ctx.Done():
			end = nowMs()
		case <-timer.C:
			end = nowMs()
		}
		timer.Stop()
		ended := "released"
		lostMu.Lock()
		for _, at := range lostAt {
			if at < end {
				end = at
			}
		}
		lostMu.Unlock()
		if ctx.Err() != nil && lock.Lease.State() != leasehold.Released {
			ended = lock.Lease.State().String()
			if lock.Lease.ExpiredLocally() {
				ended = "expiring"
			}
		}
		o.write(map[string]any{
			"kind": "belief", "lang": "go", "worker": worker, "resource": rawID, "url": urls[urlIndex],
			"token": lock.Lease.FencingToken(), "sentMs": sent, "startMs": start, "endMs": end,
			"how": lock.Outcome, "ended": ended,
		})
		beliefs++
		counts["held via "+lock.Outcome]++
		counts["ended "+ended]++
		unlockCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := lock.Unlock(unlockCtx); err != nil && !errors.Is(err, leasehold.ErrLeaseLost) {
			counts["release failed"]++
		}
		cancel()
	}
	o.write(map[string]any{"kind": "summary", "lang": "go", "worker": worker, "rounds": rounds, "beliefs": beliefs, "counts": counts})
}

func main() {
	args := os.Args[1:]
	if len(args) != 6 && len(args) != 7 {
		fmt.Fprintln(os.Stderr, "usage: mixed-worker OUT DURATION_MS TTL_MS NAME URL[,URL...] RAW_ID[,RAW_ID...] [TASKS]")
		os.Exit(2)
	}
	duration, err1 := strconv.ParseFloat(args[1], 64)
	ttlMs, err2 := strconv.Atoi(args[2])
	tasks := 2
	var err3 error
	if len(args) == 7 {
		tasks, err3 = strconv.Atoi(args[6])
	}
	if err1 != nil || err2 != nil || err3 != nil || tasks < 1 {
		fmt.Fprintln(os.Stderr, "mixed-worker: DURATION_MS, TTL_MS and TASKS are numbers")
		os.Exit(2)
	}
	file, err := os.Create(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	o := &out{file: file}
	stopAt := nowMs() + duration
	urls, ids := strings.Split(args[4], ","), strings.Split(args[5], ",")
	var wg sync.WaitGroup
	for i := 0; i < tasks; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			task(o, fmt.Sprintf("%s-%d", args[3], i), i, stopAt, time.Duration(ttlMs)*time.Millisecond, urls, ids)
		}(i)
	}
	wg.Wait()
	if err := file.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
