package leasehold_test

// The shared conformance table (clients/conformance/scenarios.json, DESIGN
// §15), run against the real service: each fault.kind maps to a harness, each
// expect member to a check. A kind or an expectation this runner does not
// know fails the test.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

const conformancePurpose = "go-conformance"

type scenario struct {
	ID     string                `json:"id"`
	Store  string                `json:"store"`
	Lease  struct{ TTLMs int64 } `json:"lease"`
	Fault  map[string]any        `json:"fault"`
	Expect map[string]any        `json:"expect"`
}

type observed map[string]any

// leaderEnv carries the leader process's arguments when this test binary is
// run again as the leader of the kill scenario.
const leaderEnv = "LEASEHOLD_GO_TEST_LEADER"

func TestMain(m *testing.M) {
	if args := os.Getenv(leaderEnv); args != "" {
		os.Exit(runLeader(strings.Split(args, ",")))
	}
	os.Exit(m.Run())
}

// runLeader campaigns, prints "leading <fencing token>" once it leads, and
// runs until killed.
func runLeader(args []string) int {
	url, purpose, rawID, holder := args[0], args[1], args[2], args[4]
	ttlMs, _ := strconv.Atoi(args[3])
	client, err := leasehold.New(url, leasehold.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	election, err := client.NewElection(leasehold.ElectionConfig{
		Purpose: purpose, RawID: rawID, Holder: holder, TTL: time.Duration(ttlMs) * time.Millisecond,
		OnStartedLeading: func(ctx context.Context, term leasehold.Term) {
			fmt.Printf("leading %d\n", term.FencingToken)
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := election.Campaign(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func loadScenarios(t *testing.T) []scenario {
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "clients", "conformance", "scenarios.json"))
	if err != nil {
		t.Fatal(err)
	}
	var table struct{ Scenarios []scenario }
	if err := json.Unmarshal(data, &table); err != nil {
		t.Fatal(err)
	}
	if len(table.Scenarios) == 0 {
		t.Fatal("no scenarios in the table")
	}
	return table.Scenarios
}

func ttlOf(sc scenario) time.Duration { return time.Duration(sc.Lease.TTLMs) * time.Millisecond }

func faultMs(sc scenario, name string) time.Duration {
	v, ok := sc.Fault[name].(float64)
	if !ok {
		panic(fmt.Sprintf("%s: fault.%s missing", sc.ID, name))
	}
	return time.Duration(v) * time.Millisecond
}

func uniqueID() string { return strconv.FormatInt(time.Now().UnixNano(), 36) }

func newClient(t testing.TB, url string) *leasehold.Client {
	c, err := leasehold.New(url, leasehold.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func dropReply(t *testing.T, sc scenario, svc *service) observed {
	if sc.Fault["verb"] != "acquire" {
		t.Fatalf("drop_reply of %v: this runner drops acquire replies only", sc.Fault["verb"])
	}
	p := startProxy(t, svc.port)
	p.dropReplies("PUT", int(sc.Fault["times"].(float64)))
	client := newClient(t, p.url)
	ctx := context.Background()
	lock, _, err := client.Lock(ctx, conformancePurpose, uniqueID(), leasehold.LockOptions{TTL: ttlOf(sc)})
	if err != nil {
		t.Fatalf("lock: %v", err)
	}
	holds := lock.Lease.Valid()
	attempt := lock.Attempt
	in, err := client.Inspect(ctx, lock.Lease.Resource(), leasehold.InspectOptions{Attempt: &attempt})
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	holds = holds && in.HeldBy == "caller"
	if err := lock.Unlock(ctx); err != nil {
		t.Fatalf("unlock: %v", err)
	}
	acquires := p.requests("PUT", "/leases/")
	attempts := map[string]bool{}
	dropped := 0
	for _, r := range acquires {
		attempts[r.ownerToken+" "+r.operationID] = true
		if r.dropped {
			dropped++
		}
	}
	return observed{
		"holds":           holds,
		"attemptsCreated": len(attempts) + len(p.requests("POST", "/attempts")),
		"acquireRequests": len(acquires),
		"finalOutcome":    lock.Outcome,
		"dropped":         dropped,
	}
}

// lossSignal records when a lease's OnLost fired.
type lossSignal struct {
	mu sync.Mutex
	at []time.Time
}

func (s *lossSignal) record(*leasehold.Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.at = append(s.at, time.Now())
}

func (s *lossSignal) first() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.at) == 0 {
		return time.Time{}, false
	}
	return s.at[0], true
}

func waitClosed(t *testing.T, ch <-chan struct{}, within time.Duration, what string) {
	select {
	case <-ch:
	case <-time.After(within):
		t.Fatalf("%s did not happen within %v", what, within)
	}
}

func freezeStore(t *testing.T, sc scenario, svc *service) observed {
	ttl := ttlOf(sc)
	client := newClient(t, svc.url)
	signals := &lossSignal{}
	ctx := context.Background()
	lock, lockCtx, err := client.Lock(ctx, conformancePurpose, uniqueID(), leasehold.LockOptions{TTL: ttl, OnLost: signals.record})
	if err != nil {
		t.Fatalf("lock: %v", err)
	}
	time.Sleep(faultMs(sc, "afterMs")) // the scenario's own timing, not a synchronisation
	svc.redis.freeze()
	validUntil := lock.Lease.ValidUntil() // as last extended before the freeze
	thawed := make(chan struct{})
	time.AfterFunc(faultMs(sc, "forMs"), func() { svc.redis.thaw(); close(thawed) })
	waitClosed(t, lock.Lease.Lost(), 2*ttl, "the loss signal")
	waitClosed(t, lockCtx.Done(), time.Second, "the lock's context cancelled")
	<-thawed
	_ = lock.Unlock(ctx)
	at, signalled := signals.first()
	// OnLost runs in its own goroutine: the context's cancellation and the
	// lease's Lost channel are the same instant's signal; the callback's time
	// is at most a scheduling delay later.
	return observed{
		"state":                         lock.Lease.State().String(),
		"signalled":                     signalled,
		"signalledBeforeValidityEnds":   signalled && at.Before(validUntil),
		"signalledMsBeforeValidityEnds": float64(validUntil.Sub(at)) / 1e6,
	}
}

func deleteLeaseKey(t *testing.T, sc scenario, svc *service) observed {
	ttl := ttlOf(sc)
	client := newClient(t, svc.url)
	signals := &lossSignal{}
	ctx := context.Background()
	rawID := uniqueID()
	lock, lockCtx, err := client.Lock(ctx, conformancePurpose, rawID, leasehold.LockOptions{TTL: ttl, OnLost: signals.record})
	if err != nil {
		t.Fatalf("lock: %v", err)
	}
	key := svc.leaseKey(conformancePurpose, leasehold.Digest(rawID))
	if got := svc.redis.cli(t, "DEL", key); got != "1" {
		t.Fatalf("DEL %s answered %q", key, got)
	}
	waitClosed(t, lock.Lease.Lost(), ttl, "the loss signal")
	waitClosed(t, lockCtx.Done(), time.Second, "the lock's context cancelled")
	_ = lock.Unlock(ctx)
	_, signalled := signals.first()
	return observed{"state": lock.Lease.State().String(), "signalled": signalled, "reason": lock.Lease.LostReason()}
}

// candidate is a second candidate campaigning in this process.
type candidate struct {
	election *leasehold.Election
	leading  chan struct{}
	started  time.Time
	done     chan error
}

func campaign(t *testing.T, client *leasehold.Client, rawID, holder string, ttl time.Duration) *candidate {
	c := &candidate{leading: make(chan struct{}), done: make(chan error, 1)}
	var once sync.Once
	election, err := client.NewElection(leasehold.ElectionConfig{
		Purpose: conformancePurpose, RawID: rawID, Holder: holder, TTL: ttl, Wait: 10 * time.Second,
		OnStartedLeading: func(ctx context.Context, term leasehold.Term) {
			once.Do(func() { c.started = time.Now(); close(c.leading) })
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	c.election = election
	go func() { c.done <- election.Campaign(context.Background()) }()
	return c
}

// untilWaiting polls the service's waiter gauge until a candidate's acquire
// waits server-side.
func untilWaiting(t *testing.T, svc *service) {
	waitUntil(t, 10*time.Second, "a waiting candidate", func() bool {
		resp, err := http.Get(svc.url + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var ready struct{ Waiters int }
		data, _ := io.ReadAll(resp.Body)
		return json.Unmarshal(data, &ready) == nil && ready.Waiters >= 1
	})
}

func killLeaderProcess(t *testing.T, sc scenario, svc *service) observed {
	ttl := ttlOf(sc)
	rawID := uniqueID()
	leader := exec.Command(os.Args[0], "-test.run=^$")
	leader.Env = append(os.Environ(), leaderEnv+"="+strings.Join(
		[]string{svc.url, conformancePurpose, rawID, strconv.FormatInt(sc.Lease.TTLMs, 10), "first"}, ","))
	stdout, err := leader.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	leader.Stderr = os.Stderr
	if err := leader.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	defer func() { _ = leader.Process.Kill(); <-exited }()
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		lines <- line
		_, _ = io.Copy(io.Discard, stdout)
		_ = leader.Wait()
		close(exited)
	}()
	select {
	case line := <-lines:
		if !strings.HasPrefix(line, "leading ") {
			t.Fatalf("the leader process said %q", line)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the leader process never led")
	}
	client := newClient(t, svc.url)
	second := campaign(t, client, rawID, "second", ttl)
	untilWaiting(t, svc)
	select {
	case <-second.leading:
		t.Fatal("the second candidate led while the first lived")
	default:
	}
	if err := leader.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	<-exited
	waitClosed(t, second.leading, 3*ttl, "the second candidate leading")
	if err := second.election.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-second.done; err != nil {
		t.Fatal(err)
	}
	return observed{"nextLeaderWithinMs": float64(second.started.Sub(killedAt)) / 1e6}
}

func resign(t *testing.T, sc scenario, svc *service) observed {
	ttl := ttlOf(sc)
	rawID := uniqueID()
	client := newClient(t, svc.url)
	first := campaign(t, client, rawID, "first", ttl)
	waitClosed(t, first.leading, 5*time.Second, "the first candidate leading")
	second := campaign(t, client, rawID, "second", ttl)
	untilWaiting(t, svc)
	if err := first.election.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	resignedAt := time.Now()
	if err := <-first.done; err != nil {
		t.Fatal(err)
	}
	waitClosed(t, second.leading, 5*time.Second, "the second candidate leading")
	if err := second.election.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-second.done; err != nil {
		t.Fatal(err)
	}
	// The new leader's acquire may be answered before Resign returns: negative.
	signed := float64(second.started.Sub(resignedAt)) / 1e6
	within := signed
	if within < 0 {
		within = 0
	}
	return observed{"nextLeaderWithinMs": within, "signedMs": signed}
}

var harnesses = map[string]func(*testing.T, scenario, *service) observed{
	"drop_reply":          dropReply,
	"freeze_store":        freezeStore,
	"delete_lease_key":    deleteLeaseKey,
	"kill_leader_process": killLeaderProcess,
	"resign":              resign,
}

func check(t *testing.T, expect map[string]any, got observed) {
	// Compare as JSON values (numbers as float64), as the table holds them.
	data, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	var norm map[string]any
	if err := json.Unmarshal(data, &norm); err != nil {
		t.Fatal(err)
	}
	for name, wanted := range expect {
		if name == "stateIn" {
			state, ok := norm["state"]
			if !ok {
				t.Errorf("this runner does not observe the state")
				continue
			}
			found := false
			for _, s := range wanted.([]any) {
				found = found || s == state
			}
			if !found {
				t.Errorf("state %v not in %v (%v)", state, wanted, norm)
			}
			continue
		}
		value, ok := norm[name]
		if !ok {
			t.Errorf("this runner does not observe %q", name)
			continue
		}
		if strings.HasSuffix(name, "WithinMs") {
			if value.(float64) > wanted.(float64) {
				t.Errorf("%s: %.1f ms > %v ms", name, value, wanted)
			}
			continue
		}
		if !reflect.DeepEqual(value, wanted) {
			t.Errorf("%s: %v != %v (%v)", name, value, wanted, norm)
		}
	}
}

func TestConformance(t *testing.T) {
	scenarios := loadScenarios(t)
	// Shared by the scenarios that leave no lasting fault behind.
	memory := startService(t, nil)
	redisShared := startService(t, startRedis(t))
	for _, sc := range scenarios {
		stores := []string{sc.Store}
		if sc.Store == "any" {
			stores = []string{"memory", "redis"}
		}
		for _, store := range stores {
			sc, store := sc, store
			t.Run(sc.ID+"-"+store, func(t *testing.T) {
				kind, _ := sc.Fault["kind"].(string)
				harness, ok := harnesses[kind]
				if !ok {
					t.Fatalf("no harness for fault kind %q", kind)
				}
				fresh := kind == "freeze_store" || kind == "delete_lease_key"
				var svc *service
				switch {
				case store == "memory":
					svc = memory
				case !fresh:
					svc = redisShared
				default:
					svc = startService(t, startRedis(t))
				}
				got := harness(t, sc, svc)
				if _, ok := got["state"]; !ok && sc.Expect["stateIn"] != nil {
					t.Fatalf("no state observed")
				}
				t.Logf("%s [%s]: %v", sc.ID, store, got)
				check(t, sc.Expect, got)
			})
		}
	}
}
