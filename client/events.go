package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/websocket"
	"github.com/tmaxmax/go-sse"
)

// EventFeedOptions selects what an EventFeed follows.
type EventFeedOptions struct {
	// Target is the session followed.
	Target Target
	// AfterSequence, when set, starts the feed after this sequence: the session's
	// events after it come first (FEED-1). Nil starts at the session's head, which the
	// first Synced item names.
	AfterSequence *int64
	// Transport is TransportWebSocket, the default, or TransportSSE; TransportAuto
	// means TransportWebSocket.
	Transport Transport
	// MinBackoff and MaxBackoff bound the wait before a reconnection; defaults 100ms
	// and 5s. A longer retryAfterMs of RATE_LIMITED is waited instead.
	MinBackoff, MaxBackoff time.Duration
}

// FeedItem is one item of an EventFeed: an event, or a marker of the feed (FEED-3).
type FeedItem struct {
	// Event is set on an event: the one after the last delivered, always.
	Event *StateEvent
	// Synced is set on the marker that ends the replay of each subscription;
	// Bookmark on the one an idle feed gets at least every 30 s. LastSequence is then
	// the last sequence delivered: every event up to it was.
	Synced, Bookmark bool
	LastSequence     int64
	// Replayed is, on Synced, how many events that subscription replayed.
	Replayed int
	// At is when the service made the marker.
	At time.Time
}

// EventFeed follows stateEventFeed of one session over a WebSocket or SSE, and
// resumes after the last sequence it delivered whenever the connection is lost or the
// service drops or restarts it: afterSequence on a WebSocket, Last-Event-ID over SSE.
// Next hands out every event of the session once, in order, with the feed's markers
// between them. It holds no goroutine: Next reads the connection. A WebSocket whose
// Next is not called answers no ping; the service may then drop it, and the next
// Next resumes.
type EventFeed struct {
	c     *Client
	o     EventFeedOptions
	last  int64
	known bool // last is set (AfterSequence, or a marker or event received)
	conn  feedConn
	delay time.Duration
	err   error // a permanent refusal: every Next returns it
}

// feedConn is one subscription of an EventFeed.
type feedConn interface {
	// next returns the payload of the next `next` message; an *Error for an answer
	// of the service that ends the subscription.
	next(ctx context.Context) ([]byte, error)
	close()
}

// Events returns a feed of o.Target's events; it connects at the first Next.
func (c *Client) Events(o EventFeedOptions) *EventFeed {
	if o.MinBackoff <= 0 {
		o.MinBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(5*time.Second, o.MinBackoff)
	}
	f := &EventFeed{c: c, o: o, delay: o.MinBackoff}
	if o.AfterSequence != nil {
		f.last, f.known = *o.AfterSequence, true
	}
	return f
}

// LastSequence is the last sequence the feed delivered or started after; ok is
// false before the feed knows one.
func (f *EventFeed) LastSequence() (seq int64, ok bool) { return f.last, f.known }

// Close ends the feed's connection; a later Next connects again.
func (f *EventFeed) Close() {
	if f.conn != nil {
		f.conn.close()
		f.conn = nil
	}
}

// Next returns the feed's next item, reconnecting as often as it takes. It returns
// an error when ctx ends, or the service's *Error when it refuses the feed for good:
// HISTORY_GAP when the sequence to resume after was pruned, CURSOR_AHEAD when it is
// above the session's head, FORBIDDEN. The feed then returns that error again.
func (f *EventFeed) Next(ctx context.Context) (FeedItem, error) {
	for {
		if f.err != nil {
			return FeedItem{}, f.err
		}
		if err := ctx.Err(); err != nil {
			return FeedItem{}, err
		}
		if f.conn == nil {
			conn, err := f.connect(ctx)
			if err != nil {
				if err := f.failed(ctx, err); err != nil {
					return FeedItem{}, err
				}
				continue
			}
			f.conn = conn
		}
		payload, err := f.conn.next(ctx)
		if err == nil {
			var it FeedItem
			if it, err = f.item(payload); err == nil {
				f.delay = f.o.MinBackoff
				return it, nil
			}
		}
		f.Close()
		if err := f.failed(ctx, err); err != nil {
			return FeedItem{}, err
		}
	}
}

// failed decides about a failed connection: a permanent refusal ends the feed, ctx's
// end is returned, anything else waits the backoff and returns nil to try again.
func (f *EventFeed) failed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if Permanent(err) {
		f.err = err
		return err
	}
	f.c.log.Debug("awareness event feed: reconnecting", "session", f.o.Target.SessionKey, "after", f.last, "err", err)
	wait := max(f.delay+rand.N(f.delay/2+1), RetryAfter(err))
	f.delay = min(2*f.delay, f.o.MaxBackoff)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

const eventFeedQuery = `subscription($k: String, $a: String, $after: Int) { stateEventFeed(sessionKey: $k, agentId: $a, afterSequence: $after) {
  __typename ... on StateEvent { sequence kind actorType actorId summary occurredAt runId payload }
  ... on FeedSynced { lastSequence replayed at } ... on FeedBookmark { lastSequence at } } }`

// item decodes one payload and checks it against the last sequence delivered.
func (f *EventFeed) item(payload []byte) (FeedItem, error) {
	var r struct {
		Data struct {
			Item *struct {
				StateEvent
				Typename     string    `json:"__typename"`
				LastSequence *int64    `json:"lastSequence"`
				Replayed     int       `json:"replayed"`
				At           time.Time `json:"at"`
			} `json:"stateEventFeed"`
		} `json:"data"`
		Errors []gqlError `json:"errors"`
	}
	if err := json.Unmarshal(payload, &r); err != nil {
		return FeedItem{}, fmt.Errorf("awareness event feed: bad item: %w", err)
	}
	if len(r.Errors) > 0 {
		return FeedItem{}, feedError(r.Errors[0])
	}
	x := r.Data.Item
	if x == nil {
		return FeedItem{}, errors.New("awareness event feed: an item without data")
	}
	switch x.Typename {
	case "StateEvent":
		if f.known && x.Sequence != f.last+1 {
			// The service never sends this (FEED-1); resubscribing resumes after the last.
			return FeedItem{}, fmt.Errorf("awareness event feed: event %d after %d", x.Sequence, f.last)
		}
		f.last, f.known = x.Sequence, true
		ev := x.StateEvent
		return FeedItem{Event: &ev}, nil
	case "FeedSynced", "FeedBookmark":
		if x.LastSequence == nil || f.known && *x.LastSequence != f.last {
			return FeedItem{}, fmt.Errorf("awareness event feed: %s at %v after %d", x.Typename, x.LastSequence, f.last)
		}
		f.last, f.known = *x.LastSequence, true
		return FeedItem{Synced: x.Typename == "FeedSynced", Bookmark: x.Typename == "FeedBookmark",
			LastSequence: *x.LastSequence, Replayed: x.Replayed, At: x.At}, nil
	}
	return FeedItem{}, fmt.Errorf("awareness event feed: an item of type %q", x.Typename)
}

// feedError is the *Error of a refused subscription, with HISTORY_GAP's earliest
// available sequence.
func feedError(e gqlError) *Error {
	out := e.err(0)
	if n, ok := e.Extensions["earliestAvailableSequence"].(float64); ok {
		out.EarliestAvailable = int64(n)
	}
	return out
}

func (f *EventFeed) vars() map[string]any {
	vars := map[string]any{"k": f.o.Target.SessionKey}
	if f.o.Target.AgentID != "" {
		vars["a"] = f.o.Target.AgentID
	}
	if f.known {
		vars["after"] = f.last
	}
	return vars
}

func (f *EventFeed) connect(ctx context.Context) (feedConn, error) {
	if f.o.Transport == TransportSSE {
		return f.connectSSE(ctx)
	}
	return f.connectWS(ctx)
}

// wsFeedConn is a graphql-transport-ws connection carrying the feed's subscription.
type wsFeedConn struct{ conn *websocket.Conn }

func (f *EventFeed) connectWS(ctx context.Context) (feedConn, error) {
	header := http.Header{}
	if a := f.c.authorization(); a != "" {
		header.Set("Authorization", a)
	}
	dialer := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}, HandshakeTimeout: wsAckWait}
	dctx, cancel := context.WithTimeout(ctx, wsAckWait)
	defer cancel()
	conn, resp, err := dialer.DialContext(dctx, f.c.wsURL, header)
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusUnauthorized {
			return nil, &Error{Code: CodeUnauthenticated, Status: resp.StatusCode, Message: "the service refused the token"}
		}
		return nil, err
	}
	stop := context.AfterFunc(dctx, func() { _ = conn.Close() })
	defer stop()
	c := &wsFeedConn{conn: conn}
	var init json.RawMessage
	if a := f.c.authorization(); a != "" {
		init, _ = json.Marshal(map[string]string{"Authorization": a})
	}
	payload, _ := json.Marshal(map[string]any{"query": eventFeedQuery, "variables": f.vars()})
	_ = conn.SetWriteDeadline(time.Now().Add(wsWriteWait))
	if err := conn.WriteJSON(wsMessage{Type: "connection_init", Payload: init}); err != nil {
		c.close()
		return nil, err
	}
	_ = conn.SetReadDeadline(time.Now().Add(wsAckWait))
	for {
		var m wsMessage
		if err := conn.ReadJSON(&m); err != nil {
			c.close()
			if serr := closeError(err); serr.Fatal {
				return nil, &Error{Code: CodeUnauthenticated, Message: serr.Err.Error()}
			}
			return nil, err
		}
		if m.Type == "connection_ack" {
			break
		}
	}
	if err := conn.WriteJSON(wsMessage{ID: "1", Type: "subscribe", Payload: payload}); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

func (c *wsFeedConn) next(ctx context.Context) ([]byte, error) {
	stop := context.AfterFunc(ctx, func() { _ = c.conn.Close() })
	defer stop()
	for {
		_ = c.conn.SetReadDeadline(time.Now().Add(streamDead))
		var m wsMessage
		if err := c.conn.ReadJSON(&m); err != nil {
			return nil, err
		}
		switch m.Type {
		case "ping":
			_ = c.conn.SetWriteDeadline(time.Now().Add(wsWriteWait))
			_ = c.conn.WriteJSON(wsMessage{Type: "pong"})
		case "next":
			return m.Payload, nil
		case "error":
			var errs []gqlError
			if json.Unmarshal(m.Payload, &errs) == nil && len(errs) > 0 {
				return nil, feedError(errs[0])
			}
			return nil, fmt.Errorf("awareness event feed: error %s", m.Payload)
		case "complete":
			return nil, errors.New("awareness event feed: the service completed the subscription")
		}
	}
}

func (c *wsFeedConn) close() { _ = c.conn.Close() }

// sseFeedConn is one graphql-sse request in distinct connections mode.
type sseFeedConn struct {
	cancel context.CancelFunc
	body   io.ReadCloser
	dog    *time.Timer
	pull   func() (sse.Event, error, bool)
	stop   func()
}

func (f *EventFeed) connectSSE(ctx context.Context) (feedConn, error) {
	vars := f.vars()
	delete(vars, "after") // Last-Event-ID says it, as a retrying graphql-sse client does
	body, _ := json.Marshal(map[string]any{"query": eventFeedQuery, "variables": vars})
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	req, err := http.NewRequestWithContext(sctx, http.MethodPost, f.c.endpoint, bytes.NewReader(body))
	if err != nil {
		cancel()
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if a := f.c.authorization(); a != "" {
		req.Header.Set("Authorization", a)
	}
	if f.known {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(f.last, 10))
	}
	stop := context.AfterFunc(ctx, cancel)
	resp, err := f.c.streamHTTP().Do(req)
	stop()
	if err != nil {
		cancel()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		defer cancel()
		defer resp.Body.Close()
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var out struct {
			Errors []gqlError `json:"errors"`
		}
		if json.Unmarshal(raw, &out) == nil && len(out.Errors) > 0 {
			return nil, out.Errors[0].err(resp.StatusCode)
		}
		return nil, &Error{Status: resp.StatusCode, Message: fmt.Sprintf("HTTP %d without an event stream", resp.StatusCode)}
	}
	c := &sseFeedConn{cancel: cancel, body: resp.Body, dog: time.AfterFunc(streamDead, cancel)}
	c.pull, c.stop = iter.Pull2(iter.Seq2[sse.Event, error](sse.Read(&watchdogReader{r: resp.Body, t: c.dog}, &sse.ReadConfig{MaxEventSize: 4 << 20})))
	return c, nil
}

func (c *sseFeedConn) next(ctx context.Context) ([]byte, error) {
	stop := context.AfterFunc(ctx, c.cancel)
	defer stop()
	for {
		ev, err, ok := c.pull()
		switch {
		case !ok:
			return nil, errors.New("awareness event feed: the stream ended")
		case err != nil:
			return nil, err
		case ev.Type == "next":
			return []byte(ev.Data), nil
		case ev.Type == "complete":
			return nil, errors.New("awareness event feed: the service completed the stream")
		}
	}
}

func (c *sseFeedConn) close() {
	c.cancel()
	c.dog.Stop()
	c.stop()
	_ = c.body.Close()
}
