package leasehold

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// watchReadTimeout: how long a stream may stay silent (the service sends a
// comment line every 15 s at most) before it counts as cut.
const watchReadTimeout = 45 * time.Second

// maxEventBytes bounds one event's data.
const maxEventBytes = 1 << 20

// WatchEvent is one event of a resource's stream: "state" first, then
// acquired, released, expired, holder_changed, revoked. ID is its version.
type WatchEvent struct {
	Event string
	ID    string
	State Inspection
}

// WatchOptions: LastEventID resumes after an event seen before (the service
// then sends a state event only when something changed meanwhile);
// MaxReconnects failed reconnections in a row end the watch (default 5);
// RetryPeriod is the pause before reconnecting (default 500 ms).
type WatchOptions struct {
	LastEventID   string
	NoReconnect   bool
	MaxReconnects int
	RetryPeriod   time.Duration
}

// Watcher reads a resource's event stream (GET …/events); after a cut it
// reconnects with Last-Event-ID. Use it from one goroutine; Close from any.
type Watcher struct {
	client *Client
	res    Resource
	opts   WatchOptions
	ctx    context.Context
	cancel context.CancelFunc

	lastID    string
	connected bool
	failures  int
	body      io.ReadCloser
	reader    *bufio.Reader
	connStop  context.CancelFunc
	idle      *time.Timer
	parser    sseParser
	closeOnce sync.Once
}

// Watch connects to the resource's event stream (an error when that first
// connection fails); Next reads it. ctx bounds the whole watch.
func (c *Client) Watch(ctx context.Context, res Resource, opts WatchOptions) (*Watcher, error) {
	if err := res.check(); err != nil {
		return nil, err
	}
	if opts.MaxReconnects <= 0 {
		opts.MaxReconnects = 5
	}
	if opts.RetryPeriod <= 0 {
		opts.RetryPeriod = 500 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &Watcher{client: c, res: res, opts: opts, ctx: ctx, cancel: cancel, lastID: opts.LastEventID}
	if err := w.connect(); err != nil {
		cancel()
		return nil, err
	}
	w.connected = true
	return w, nil
}

// LastEventID is the id of the last event read (what a resume sends).
func (w *Watcher) LastEventID() string { return w.lastID }

// Close ends the watch; a Next in progress returns an error.
func (w *Watcher) Close() {
	w.closeOnce.Do(w.cancel)
}

func (w *Watcher) disconnect() {
	if w.body != nil {
		w.body.Close()
		w.body = nil
	}
	if w.idle != nil {
		w.idle.Stop()
	}
	if w.connStop != nil {
		w.connStop()
	}
}

func (w *Watcher) connect() error {
	ctx, stop := context.WithCancel(w.ctx)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.client.leaseURL(w.res)+"/events", nil)
	if err != nil {
		stop()
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	if w.client.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+w.client.apiKey)
	}
	if w.lastID != "" {
		req.Header.Set("Last-Event-ID", w.lastID)
	}
	// Connecting and the answer's head are bounded by the client's timeout;
	// the stream itself by the idle timer.
	head := time.AfterFunc(w.client.timeout, stop)
	resp, err := w.client.http.Do(req)
	head.Stop()
	if err != nil {
		stop()
		return transportError(err, false, "watch", "")
	}
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, maxReply))
		resp.Body.Close()
		stop()
		r := &reply{status: resp.StatusCode, raw: data}
		r.ok = jsonObject(data, &r.body)
		return r.failure("watch", "")
	}
	w.body, w.connStop = resp.Body, stop
	w.reader = bufio.NewReaderSize(resp.Body, 64<<10)
	w.idle = time.AfterFunc(watchReadTimeout, stop)
	w.parser = sseParser{lastID: w.lastID}
	return nil
}

// Next blocks until the next event, the end of the watch (Close or its
// context: the context's error), or a failure that reconnecting did not mend.
func (w *Watcher) Next() (WatchEvent, error) {
	for {
		if err := w.ctx.Err(); err != nil {
			w.disconnect()
			return WatchEvent{}, err
		}
		if w.body == nil {
			if err := w.connect(); err != nil {
				if w.ctx.Err() != nil {
					return WatchEvent{}, w.ctx.Err()
				}
				var le *Error
				retriable := errors.As(err, &le) && (le.Kind == ErrUnavailable || le.Kind == ErrOverloaded || le.Kind == ErrIndeterminate)
				if !retriable || !w.connected || w.opts.NoReconnect || w.failures >= w.opts.MaxReconnects {
					return WatchEvent{}, err
				}
				w.failures++
				sleepCtx(w.ctx, w.opts.RetryPeriod)
				continue
			}
			w.connected, w.failures = true, 0
		}
		line, tooLong, err := readLine(w.reader)
		if tooLong {
			w.disconnect()
			return WatchEvent{}, &Error{Kind: ErrIndeterminate, Op: "watch", Cause: "unexpected_reply"}
		}
		if err != nil {
			w.disconnect()
			if w.ctx.Err() != nil {
				return WatchEvent{}, w.ctx.Err()
			}
			if w.opts.NoReconnect {
				return WatchEvent{}, &Error{Kind: ErrUnavailable, Op: "watch", Cause: "connection_lost", Err: err}
			}
			w.failures++
			if w.failures > w.opts.MaxReconnects {
				return WatchEvent{}, &Error{Kind: ErrUnavailable, Op: "watch", Cause: "connection_lost", Err: err}
			}
			sleepCtx(w.ctx, w.opts.RetryPeriod)
			continue
		}
		w.idle.Reset(watchReadTimeout)
		raw, done := w.parser.feed(strings.TrimRight(line, "\r\n"))
		if w.parser.size > maxEventBytes {
			w.disconnect()
			return WatchEvent{}, &Error{Kind: ErrIndeterminate, Op: "watch", Cause: "unexpected_reply"}
		}
		if !done {
			continue
		}
		w.lastID = raw.id
		state, ok := inspection([]byte(raw.data))
		if !ok {
			w.disconnect()
			return WatchEvent{}, &Error{Kind: ErrIndeterminate, Op: "watch", Cause: "unexpected_reply"}
		}
		return WatchEvent{Event: raw.event, ID: raw.id, State: state}, nil
	}
}

// readLine reads one line of the stream, its end included; tooLong (and
// nothing more read) once it passes maxEventBytes: the bound holds for every
// line, a comment's too, and before the line is buffered whole.
func readLine(r *bufio.Reader) (line string, tooLong bool, err error) {
	var buf []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(buf)+len(chunk) > maxEventBytes+len("data: \r\n") {
			return "", true, nil
		}
		buf = append(buf, chunk...)
		if err != bufio.ErrBufferFull {
			return string(buf), false, err
		}
	}
}

// sseParser: the text/event-stream rules leasehold's stream needs: event:,
// id:, data: (joined with newlines); a blank line dispatches; lines starting
// with ':' are comments; retry: and unknown fields are ignored.
type sseParser struct {
	lastID  string
	event   string
	data    []string
	hasData bool
	size    int
}

type rawEvent struct {
	event, data, id string
}

func (p *sseParser) feed(line string) (rawEvent, bool) {
	if line == "" {
		if !p.hasData {
			p.event = ""
			return rawEvent{}, false
		}
		ev := p.event
		if ev == "" {
			ev = "message"
		}
		out := rawEvent{event: ev, data: strings.Join(p.data, "\n"), id: p.lastID}
		p.event, p.data, p.hasData, p.size = "", nil, false, 0
		return out, true
	}
	if strings.HasPrefix(line, ":") {
		return rawEvent{}, false
	}
	name, value, found := strings.Cut(line, ":")
	if found {
		value = strings.TrimPrefix(value, " ")
	}
	switch name {
	case "event":
		p.event = value
	case "data":
		p.data = append(p.data, value)
		p.hasData = true
		p.size += len(value)
	case "id":
		if !strings.Contains(value, "\x00") {
			p.lastID = value
		}
	}
	return rawEvent{}, false
}
