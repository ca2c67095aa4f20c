package leasehold_test

// The client against the real service binary (embedded store): the verbs'
// typed outcomes, the handle's state machine, WithLock, Watch and elections.

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// memoryService is one embedded-store service per test.
func memoryService(t *testing.T) *service { return startService(t, nil) }

func TestVerbsAnswerTypedOutcomes(t *testing.T) {
	svc := memoryService(t)
	p := startProxy(t, svc.port)
	client := newClient(t, p.url)
	ctx := context.Background()
	res, _ := leasehold.NewResource("go-verbs", uniqueID())
	a, _ := leasehold.NewAttempt("op-a")
	b, _ := leasehold.NewAttempt("op-b")

	got, err := client.Acquire(ctx, res, a, leasehold.AcquireOptions{TTL: 5 * time.Second, Holder: "go-test"})
	if err != nil || got.Outcome != leasehold.OutcomeAcquired || !got.Held() {
		t.Fatalf("acquire: %+v %v", got, err)
	}
	lease := got.Lease
	if lease.FencingToken() <= 0 || lease.Record().Holder != "go-test" || lease.State() != leasehold.Active {
		t.Fatalf("lease %v %+v", lease, lease.Record())
	}
	if left := lease.ValidFor(); left <= 4*time.Second || left > 5*time.Second-50*time.Millisecond {
		t.Fatalf("valid for %v of a 5 s lease (drift 50 ms)", left)
	}
	again, err := client.Acquire(ctx, res, a, leasehold.AcquireOptions{TTL: 5 * time.Second})
	if err != nil || again.Outcome != leasehold.OutcomeReplayed || again.Lease.FencingToken() != lease.FencingToken() {
		t.Fatalf("replay: %+v %v", again, err)
	}
	other, err := client.Acquire(ctx, res, b, leasehold.AcquireOptions{TTL: 5 * time.Second})
	if err != nil || other.Outcome != leasehold.OutcomeContended || other.Held() || other.RetryAfter <= 0 {
		t.Fatalf("contended: %+v %v", other, err)
	}
	in, err := client.Inspect(ctx, res, leasehold.InspectOptions{Attempt: &b})
	if err != nil || !in.Held || in.HeldBy != "other" || in.Holder != "go-test" || *in.FencingToken != lease.FencingToken() {
		t.Fatalf("inspect: %+v %v", in, err)
	}
	renewed, err := lease.Renew(ctx, "")
	if err != nil || renewed.Outcome != leasehold.OutcomeRenewed || renewed.Record.FencingToken != lease.FencingToken() {
		t.Fatalf("renew: %+v %v", renewed, err)
	}
	released, err := lease.Release(ctx)
	if err != nil || released.Outcome != leasehold.OutcomeReleased || lease.State() != leasehold.Released {
		t.Fatalf("release: %+v %v %v", released, err, lease.State())
	}
	select {
	case <-lease.Lost():
		t.Fatal("a release fired the loss signal")
	case <-lease.Done():
	}
	patches := len(p.requests("PATCH", "/leases/"))
	if _, err := lease.Renew(ctx, ""); !errors.Is(err, leasehold.ErrRefused) {
		t.Fatalf("renew after release: %v", err)
	}
	if n := len(p.requests("PATCH", "/leases/")); n != patches {
		t.Fatalf("a refused renew was sent (%d PATCH, was %d)", n, patches)
	}
	// The other attempt's renew is told the lease is gone.
	lost, err := client.Renew(ctx, res, b, 5*time.Second, "")
	if err != nil || lost.Outcome != leasehold.OutcomeLost || lost.Reason != "absent" {
		t.Fatalf("renew by another: %+v %v", lost, err)
	}
	// A TTL out of bounds: a rejection carrying the problem's fields.
	_, err = client.Acquire(ctx, res, b, leasehold.AcquireOptions{TTL: 2 * time.Hour})
	var le *leasehold.Error
	if !errors.Is(err, leasehold.ErrInvalidRequest) || !errors.Is(err, leasehold.ErrRejected) || !errors.As(err, &le) ||
		le.Problem == nil || le.Problem.Status != 422 && le.Problem.Status != 400 || len(le.Problem.Errors) == 0 {
		t.Fatalf("invalid: %v", err)
	}
	// A created attempt is used like a local one.
	created, err := client.CreateAttempt(ctx, "op-created")
	if err != nil || created.OperationID() != "op-created" || len(created.OwnerToken()) != 32 {
		t.Fatalf("attempt: %v %v", created, err)
	}
}

func TestWithLockRunsTheWorkUnderTheLeaseAndReleases(t *testing.T) {
	svc := memoryService(t)
	client := newClient(t, svc.url)
	ctx := context.Background()
	rawID := uniqueID()
	var token int64
	err := client.WithLock(ctx, "go-lock", rawID, leasehold.LockOptions{TTL: 300 * time.Millisecond}, func(ctx context.Context) error {
		lease := leasehold.LeaseFrom(ctx)
		token = lease.FencingToken()
		// Longer than the TTL: the watchdog renews.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(700 * time.Millisecond):
		}
		return lease.Check()
	})
	if err != nil || token <= 0 {
		t.Fatalf("with lock: %v (token %d)", err, token)
	}
	res, _ := leasehold.NewResource("go-lock", rawID)
	in, err := client.Inspect(ctx, res, leasehold.InspectOptions{})
	if err != nil || in.Held {
		t.Fatalf("held after WithLock returned: %+v %v", in, err)
	}
	// Held by another: not acquired, with the holder's remaining time.
	lock, _, err := client.Lock(ctx, "go-lock", rawID, leasehold.LockOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Unlock(ctx)
	var na *leasehold.NotAcquiredError
	err = client.WithLock(ctx, "go-lock", rawID, leasehold.LockOptions{TTL: time.Second}, func(context.Context) error {
		t.Error("ran without the lease")
		return nil
	})
	if !errors.Is(err, leasehold.ErrNotAcquired) || !errors.As(err, &na) || na.Outcome.RetryAfter <= 0 {
		t.Fatalf("contended: %v", err)
	}
	if lock.Keeper().Renewals() < 0 || lock.Lease.State() != leasehold.Active {
		t.Fatal("the first lock lost its lease")
	}
}

func TestWatchResumesWithLastEventID(t *testing.T) {
	svc := memoryService(t)
	client := newClient(t, svc.url)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, _ := leasehold.NewResource("go-watch", uniqueID())
	w, err := client.Watch(ctx, res, leasehold.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := w.Next()
	if err != nil || first.Event != "state" || first.State.Held {
		t.Fatalf("first: %+v %v", first, err)
	}
	a, _ := leasehold.NewAttempt("watched")
	got, err := client.Acquire(ctx, res, a, leasehold.AcquireOptions{TTL: 5 * time.Second, Holder: "w1"})
	if err != nil || !got.Held() {
		t.Fatal(err)
	}
	ev, err := w.Next()
	if err != nil || ev.Event != "acquired" || ev.State.Holder != "w1" || ev.ID == "" || ev.ID == first.ID {
		t.Fatalf("acquired: %+v %v", ev, err)
	}
	w.Close()
	if _, err := w.Next(); err == nil {
		t.Fatal("a closed watcher went on")
	}
	// Resumed at the last event seen: nothing changed, so the next event is
	// the next change, not a state event.
	resumed, err := client.Watch(ctx, res, leasehold.WatchOptions{LastEventID: ev.ID})
	if err != nil {
		t.Fatal(err)
	}
	defer resumed.Close()
	if _, err := got.Lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next, err := resumed.Next()
	if err != nil || next.Event != "released" || next.State.Held {
		t.Fatalf("after resume: %+v %v", next, err)
	}
	// Resumed from an old id after a change: a state event first.
	stale, err := client.Watch(ctx, res, leasehold.WatchOptions{LastEventID: first.ID})
	if err != nil {
		t.Fatal(err)
	}
	defer stale.Close()
	st, err := stale.Next()
	if err != nil || st.Event != "state" || st.ID != next.ID {
		t.Fatalf("stale resume: %+v %v (want state %s)", st, err, next.ID)
	}
}

func TestElectionCallbacksAndObserver(t *testing.T) {
	svc := memoryService(t)
	client := newClient(t, svc.url)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rawID := uniqueID()
	res, _ := leasehold.NewResource(conformancePurpose, rawID)
	observed := client.Observe(ctx, res, 2*time.Second)
	if l := <-observed; l.IsHeld() {
		t.Fatalf("a leader before any campaign: %+v", l)
	}
	started := make(chan leasehold.Term, 1)
	stopped := make(chan leasehold.StopReason, 1)
	termCtxDone := make(chan struct{})
	newLeaders := make(chan leasehold.Leader, 8)
	election, err := client.NewElection(leasehold.ElectionConfig{
		Purpose: conformancePurpose, RawID: rawID, Holder: "pod-a", TTL: 500 * time.Millisecond,
		OnStartedLeading: func(ctx context.Context, term leasehold.Term) {
			started <- term
			<-ctx.Done()
			close(termCtxDone)
		},
		OnStoppedLeading: func(term leasehold.Term, reason leasehold.StopReason) { stopped <- reason },
		OnNewLeader:      func(l leasehold.Leader) { newLeaders <- l },
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- election.Campaign(ctx) }()
	term := <-started
	if term.Holder != "pod-a" || term.FencingToken <= 0 || !election.IsLeader() {
		t.Fatalf("term %+v", term)
	}
	if l := <-observed; l.Holder != "pod-a" || l.FencingToken != term.FencingToken {
		t.Fatalf("observer saw %+v", l)
	}
	for l := range newLeaders {
		if l.Holder == "pod-a" {
			break
		}
	}
	if err := election.Proclaim(ctx, "pod-a2"); err != nil {
		t.Fatal(err)
	}
	if l := <-observed; l.Holder != "pod-a2" || l.FencingToken != term.FencingToken {
		t.Fatalf("observer after proclaim saw %+v", l)
	}
	// Past the TTL: the watchdog renews the leader's lease.
	time.Sleep(800 * time.Millisecond)
	if !election.IsLeader() {
		t.Fatal("the leader lost its lease while renewing")
	}
	if err := election.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	<-termCtxDone
	if r := <-stopped; r != leasehold.Resigned {
		t.Fatalf("stopped: %v", r)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if l := <-observed; l.IsHeld() {
		t.Fatalf("observer after resign saw %+v", l)
	}
}

func TestLockWaitsServerSideForTheHolder(t *testing.T) {
	svc := memoryService(t)
	client := newClient(t, svc.url)
	ctx := context.Background()
	rawID := uniqueID()
	first, _, err := client.Lock(ctx, "go-lock", rawID, leasehold.LockOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		lock *leasehold.Lock
		err  error
	}
	second := make(chan result, 1)
	go func() {
		l, _, err := client.Lock(ctx, "go-lock", rawID, leasehold.LockOptions{TTL: 5 * time.Second, Wait: 5 * time.Second})
		second <- result{l, err}
	}()
	untilWaiting(t, svc)
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-second
	if r.err != nil || r.lock.Outcome != leasehold.OutcomeAcquired || r.lock.Lease.FencingToken() <= first.Lease.FencingToken() {
		t.Fatalf("second: %+v %v", r.lock, r.err)
	}
	if err := r.lock.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestALeaderWhoseLeaseIsTakenAwayStopsAndCampaignsAgain(t *testing.T) {
	svc := startService(t, startRedis(t))
	client := newClient(t, svc.url)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rawID := uniqueID()
	terms := make(chan leasehold.Term, 4)
	ended := make(chan struct{}, 4)
	stopped := make(chan leasehold.StopReason, 4)
	election, err := client.NewElection(leasehold.ElectionConfig{
		Purpose: conformancePurpose, RawID: rawID, Holder: "pod-b", TTL: 900 * time.Millisecond,
		OnStartedLeading: func(ctx context.Context, term leasehold.Term) {
			terms <- term
			<-ctx.Done()
			ended <- struct{}{}
		},
		OnStoppedLeading: func(term leasehold.Term, reason leasehold.StopReason) { stopped <- reason },
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- election.Campaign(ctx) }()
	first := <-terms
	key := svc.leaseKey(conformancePurpose, leasehold.Digest(rawID))
	if got := svc.redis.cli(t, "DEL", key); got != "1" {
		t.Fatalf("DEL %s: %q", key, got)
	}
	<-ended
	if r := <-stopped; r != leasehold.LostLeadership {
		t.Fatalf("stopped: %v", r)
	}
	if first.Lease.LostReason() != "absent" {
		t.Fatalf("reason %q", first.Lease.LostReason())
	}
	second := <-terms
	if second.FencingToken <= first.FencingToken {
		t.Fatalf("fencing token did not grow: %d then %d", first.FencingToken, second.FencingToken)
	}
	if err := election.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestWatchReconnectsAfterACutWithLastEventID(t *testing.T) {
	svc := memoryService(t)
	p := startProxy(t, svc.port)
	watching := newClient(t, p.url)
	direct := newClient(t, svc.url)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, _ := leasehold.NewResource("go-watch", uniqueID())
	w, err := watching.Watch(ctx, res, leasehold.WatchOptions{RetryPeriod: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	first, err := w.Next()
	if err != nil || first.Event != "state" {
		t.Fatalf("first: %+v %v", first, err)
	}
	p.cut()
	a, _ := leasehold.NewAttempt("watched")
	if got, err := direct.Acquire(ctx, res, a, leasehold.AcquireOptions{TTL: 5 * time.Second}); err != nil || !got.Held() {
		t.Fatalf("acquire: %v", err)
	}
	// Whether the change came before the reconnection (a state event) or
	// after it (acquired), the watcher hears of it, once.
	ev, err := w.Next()
	if err != nil || (ev.Event != "state" && ev.Event != "acquired") || !ev.State.Held || ev.ID == first.ID {
		t.Fatalf("after the cut: %+v %v", ev, err)
	}
	streams := p.requests("GET", "/leases/")
	if len(streams) < 2 || streams[0].lastEventID != "" || streams[len(streams)-1].lastEventID != first.ID {
		t.Fatalf("reconnections %+v (want the last with Last-Event-ID %s)", streams, first.ID)
	}
}

func TestListPagesThroughTheLeasesOfAPurpose(t *testing.T) {
	svc := memoryService(t)
	client := newClient(t, svc.url)
	ctx := context.Background()
	purpose := "go-list"
	want := map[string]bool{}
	for i := 0; i < 3; i++ {
		res, _ := leasehold.NewResource(purpose, uniqueID())
		a, _ := leasehold.NewAttempt("op-list")
		if got, err := client.Acquire(ctx, res, a, leasehold.AcquireOptions{TTL: 5 * time.Second, Holder: "lister"}); err != nil || !got.Held() {
			t.Fatal(err)
		}
		want[res.Digest] = true
	}
	seen := map[string]bool{}
	cursor, pages := "", 0
	for {
		page, err := client.List(ctx, purpose, 2, cursor)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, l := range page.Leases {
			if l.Holder != "lister" || l.FencingToken <= 0 {
				t.Fatalf("listed %+v", l)
			}
			seen[l.Digest] = true
		}
		if page.NextCursor == "" || pages > 5 {
			break
		}
		cursor = page.NextCursor
	}
	if len(seen) != 3 || pages < 2 {
		t.Fatalf("saw %d leases in %d pages", len(seen), pages)
	}
	for d := range want {
		if !seen[d] {
			t.Fatalf("%s not listed", d)
		}
	}
	_, err := client.List(ctx, purpose, 5000, "")
	if !errors.Is(err, leasehold.ErrInvalidRequest) {
		t.Fatalf("limit 5000: %v", err)
	}
}

func TestOverloadedAndUnavailableAreTheirOwnKinds(t *testing.T) {
	redis := startRedis(t)
	probe := &http.Client{Timeout: 500 * time.Millisecond}
	svc := launchService(t, redis, []string{"LEASEHOLD_MAX_WATCHERS=1"}, "http", probe)
	client := newClient(t, svc.url)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, _ := leasehold.NewResource("go-kinds", uniqueID())
	w, err := client.Watch(ctx, res, leasehold.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Next(); err != nil {
		t.Fatal(err)
	}
	// Beyond the watcher cap: shed before the store, definitely not applied.
	_, err = client.Watch(ctx, res, leasehold.WatchOptions{})
	var le *leasehold.Error
	if !errors.Is(err, leasehold.ErrOverloaded) || errors.Is(err, leasehold.ErrIndeterminate) || !errors.As(err, &le) || le.Problem == nil {
		t.Fatalf("second watch: %v", err)
	}
	// The store gone: a command on a connection that died under it is
	// indeterminate; once the service knows, it answers unavailable (a
	// refused connect: nothing applied). Same attempt each time.
	redis.stop()
	a, _ := leasehold.NewAttempt("op-kinds")
	for i := 0; ; i++ {
		_, err = client.Acquire(ctx, res, a, leasehold.AcquireOptions{TTL: time.Second})
		if errors.Is(err, leasehold.ErrUnavailable) {
			break
		}
		if !errors.Is(err, leasehold.ErrIndeterminate) || i == 20 {
			t.Fatalf("acquire without redis, try %d: %v", i, err)
		}
	}
	if !errors.As(err, &le) || le.Cause != "service" || le.Problem.Status != 503 || le.OperationID != "op-kinds" {
		t.Fatalf("acquire without redis: %v", err)
	}
}
