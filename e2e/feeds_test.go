package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/awareness/awareness/client"
	"github.com/awareness/awareness/internal/models/pgtest"
)

// The resumable feeds (FEED-1..3) against the real binary: stateEvents and
// stateEventFeed resumed after a sequence (afterSequence on a WebSocket, Last-Event-ID
// over SSE), the synced marker of every feed, bookmarks, and HISTORY_GAP for a pruned
// sequence, on SQLite and on PostgreSQL (two processes).

const (
	feedQuery = `subscription($k: String, $a: Int) { stateEventFeed(sessionKey: $k, afterSequence: $a) {
  __typename ... on StateEvent { sequence } ... on FeedSynced { lastSequence replayed } ... on FeedBookmark { lastSequence } } }`
	plainQuery = `subscription($k: String, $a: Int) { stateEvents(sessionKey: $k, afterSequence: $a) { sequence } }`
)

// feedItem is one item of an event stream as the test reads it: an event, a marker, or
// the stream's error.
type feedItem struct {
	typename string // StateEvent, FeedSynced, FeedBookmark
	sequence int64  // StateEvent
	last     *int64 // the markers' lastSequence
	replayed int
	id       string // the SSE event id
	err      *gqlError
}

// decodeFeedItem decodes the payload of a next frame (a WebSocket's payload, an SSE
// event's data) of stateEventFeed or stateEvents.
func decodeFeedItem(payload []byte) (feedItem, error) {
	var r struct {
		Data struct {
			Feed *struct {
				Typename     string `json:"__typename"`
				Sequence     int64  `json:"sequence"`
				LastSequence *int64 `json:"lastSequence"`
				Replayed     int    `json:"replayed"`
			} `json:"stateEventFeed"`
			Plain *struct {
				Sequence int64 `json:"sequence"`
			} `json:"stateEvents"`
		} `json:"data"`
		Errors []gqlError `json:"errors"`
	}
	if err := json.Unmarshal(payload, &r); err != nil {
		return feedItem{}, fmt.Errorf("bad payload %q: %w", payload, err)
	}
	switch {
	case len(r.Errors) > 0:
		return feedItem{err: &r.Errors[0]}, nil
	case r.Data.Feed != nil:
		f := r.Data.Feed
		return feedItem{typename: f.Typename, sequence: f.Sequence, last: f.LastSequence, replayed: f.Replayed}, nil
	case r.Data.Plain != nil:
		return feedItem{typename: "StateEvent", sequence: r.Data.Plain.Sequence}, nil
	}
	return feedItem{}, fmt.Errorf("payload %q has no item", payload)
}

// feedStream is one subscription of an event stream, over a WebSocket or SSE.
type feedStream interface {
	// next returns the next item; an error when the stream ended or nothing came.
	next() (feedItem, error)
	// cut ends the stream as a network failure would: no complete, no close frame.
	cut()
}

// wsFeed is a graphql-transport-ws connection carrying one subscription.
type wsFeed struct {
	c *websocket.Conn
}

func openWSFeed(url, query string, vars map[string]any) (*wsFeed, error) {
	d := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}, HandshakeTimeout: wait}
	c, resp, err := d.Dial(url, nil)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	f := &wsFeed{c: c}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	if err := c.WriteJSON(frame{Type: "connection_init", Payload: json.RawMessage(`{}`)}); err != nil {
		c.Close()
		return nil, err
	}
	for {
		var m frame
		if err := c.ReadJSON(&m); err != nil {
			c.Close()
			return nil, err
		}
		if m.Type == "connection_ack" {
			break
		}
	}
	payload, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	if err := c.WriteJSON(frame{Type: "subscribe", ID: "1", Payload: payload}); err != nil {
		c.Close()
		return nil, err
	}
	return f, nil
}

func (f *wsFeed) next() (feedItem, error) {
	for {
		_ = f.c.SetReadDeadline(time.Now().Add(wait))
		var m frame
		if err := f.c.ReadJSON(&m); err != nil {
			return feedItem{}, err
		}
		switch m.Type {
		case "ping":
			_ = f.c.WriteJSON(frame{Type: "pong"})
			continue
		case "next":
			return decodeFeedItem(m.Payload)
		case "error":
			var errs []gqlError
			_ = json.Unmarshal(m.Payload, &errs)
			if len(errs) == 0 {
				return feedItem{}, fmt.Errorf("error frame %s", m.Payload)
			}
			return feedItem{err: &errs[0]}, nil
		default:
			return feedItem{}, fmt.Errorf("unexpected %s frame %s", m.Type, m.Payload)
		}
	}
}

func (f *wsFeed) cut() { _ = f.c.NetConn().Close() }

// sseFeed is one graphql-sse request (distinct connections mode).
type sseFeed struct {
	cancel context.CancelFunc
	body   io.ReadCloser
	sc     *bufio.Scanner
}

// openSSEFeed POSTs query with vars as an SSE request, with Last-Event-ID when lastID
// is set: what a graphql-sse client does when its headers option is a function that
// returns the id of the last event it received.
func openSSEFeed(client *http.Client, base, query string, vars map[string]any, lastID string) (*sseFeed, error) {
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/query", bytes.NewReader(body))
	if err != nil {
		cancel()
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := client.Do(req)
	if err != nil {
		cancel()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		cancel()
		return nil, fmt.Errorf("SSE answered %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	return &sseFeed{cancel: cancel, body: resp.Body, sc: sc}, nil
}

func (f *sseFeed) next() (feedItem, error) {
	var event, id, data string
	timer := time.AfterFunc(wait, f.cancel)
	defer timer.Stop()
	for f.sc.Scan() {
		line := f.sc.Text()
		switch {
		case line == "":
			switch event {
			case "":
				continue // a comment (keep-alive)
			case "next":
				it, err := decodeFeedItem([]byte(data))
				it.id = id
				return it, err
			default:
				return feedItem{}, fmt.Errorf("unexpected SSE event %q", event)
			}
		case strings.HasPrefix(line, "event: "):
			event = line[len("event: "):]
		case strings.HasPrefix(line, "id: "):
			id = line[len("id: "):]
		case strings.HasPrefix(line, "data: "):
			data = line[len("data: "):]
		}
	}
	if err := f.sc.Err(); err != nil {
		return feedItem{}, err
	}
	return feedItem{}, io.EOF
}

func (f *sseFeed) cut() {
	f.cancel()
	f.body.Close()
}

// resumer follows the events of one session across forced disconnects, checking
// every item as it comes: each event is the one after the last (nothing lost, nothing
// twice), each marker names the last sequence received, every feed subscription sends
// its FeedSynced, and (over SSE) every event's id is its sequence.
type resumer struct {
	t         *testing.T
	transport string // "websocket" or "sse"
	servers   []*server
	key       string
	client    *http.Client

	last        int64 // the last sequence received
	received    int64
	synced      int // feed subscriptions that sent FeedSynced
	feeds       int // feed subscriptions opened
	bookmarks   int
	attempts    int
	maxBacklog  int
	plainResume int // stateEvents subscriptions
	limited     int // subscriptions refused with RATE_LIMITED and asked again
	dropped     int // subscriptions the server dropped as slow, resumed
}

// retryLimited runs call until it is not refused with RATE_LIMITED.
func retryLimited(call func() error) error {
	for {
		err := call()
		if err == nil || !strings.Contains(err.Error(), "RATE_LIMITED") {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// rateLimited is an attempt the service refused for the caller's budget (ERR-4): the
// resumer waits retryAfterMs and subscribes again, as a client does.
type rateLimited struct{ wait time.Duration }

// droppedSlow reports whether err is the end of a subscription the server dropped for
// falling behind: a WebSocket closed with 1013, an SSE stream ended without complete.
func droppedSlow(err error) bool {
	if ce, ok := errors.AsType[*websocket.CloseError](err); ok {
		return ce.Code == websocket.CloseTryAgainLater
	}
	return errors.Is(err, io.EOF)
}

func (e rateLimited) Error() string { return fmt.Sprintf("RATE_LIMITED, retry after %v", e.wait) }

// open subscribes once, resuming after r.last: a WebSocket passes afterSequence; SSE
// sends the first request's body again (afterSequence 0) with Last-Event-ID, as a
// graphql-sse client retrying with a headers function does.
func (r *resumer) open(feed bool) (feedStream, error) {
	s := r.servers[r.attempts%len(r.servers)]
	q := plainQuery
	if feed {
		q = feedQuery
	}
	if r.transport == "websocket" {
		return openWSFeed(s.wsURL, q, map[string]any{"k": r.key, "a": r.last})
	}
	lastID := ""
	if r.last > 0 {
		lastID = strconv.FormatInt(r.last, 10)
	}
	return openSSEFeed(r.client, s.base, q, map[string]any{"k": r.key, "a": 0}, lastID)
}

// attempt runs one subscription: it reads the replay, the FeedSynced of a feed and
// then want live events (stopping early once the session's head is reached when stop
// is set), then cuts the connection.
func (r *resumer) attempt(feed bool, want int, done func() bool) error {
	st, err := r.open(feed)
	if err != nil {
		return fmt.Errorf("attempt %d: subscribe: %w", r.attempts, err)
	}
	defer st.cut()
	r.attempts++
	if feed {
		r.feeds++
	} else {
		r.plainResume++
	}
	synced, live, backlog := !feed, 0, 0
	for !synced || live < want {
		it, err := st.next()
		if err != nil {
			if done() && synced {
				return nil // the writer stopped: no more live events will come
			}
			if droppedSlow(err) && feed && !synced {
				r.feeds-- // dropped before its FeedSynced: not a feed that had to send one
			}
			return fmt.Errorf("attempt %d (after %d): %w", r.attempts, r.last, err)
		}
		if it.err != nil {
			if code, _ := it.err.Extensions["code"].(string); code == "RATE_LIMITED" && synced == !feed && backlog == 0 && live == 0 {
				// Refused before its first item: not an attempt; asked again after the wait.
				r.attempts--
				if feed {
					r.feeds--
				} else {
					r.plainResume--
				}
				ms, _ := it.err.Extensions["retryAfterMs"].(float64)
				return rateLimited{time.Duration(ms) * time.Millisecond}
			}
			return fmt.Errorf("attempt %d (after %d): refused: %+v", r.attempts, r.last, *it.err)
		}
		switch it.typename {
		case "StateEvent":
			if it.sequence != r.last+1 {
				return fmt.Errorf("attempt %d: event %d after %d: %s", r.attempts, it.sequence, r.last,
					map[bool]string{true: "a copy", false: "a gap"}[it.sequence <= r.last])
			}
			if r.transport == "sse" && it.id != strconv.FormatInt(it.sequence, 10) {
				return fmt.Errorf("attempt %d: event %d has SSE id %q", r.attempts, it.sequence, it.id)
			}
			r.last = it.sequence
			r.received++
			if synced {
				live++
			} else {
				backlog++
			}
		case "FeedSynced":
			if synced {
				return fmt.Errorf("attempt %d: a second FeedSynced", r.attempts)
			}
			if it.last == nil || *it.last != r.last || it.replayed != backlog {
				return fmt.Errorf("attempt %d: FeedSynced %v/%d after %d events to %d", r.attempts, it.last, it.replayed, backlog, r.last)
			}
			synced = true
			r.synced++
			r.maxBacklog = max(r.maxBacklog, backlog)
			if done() {
				return nil
			}
		case "FeedBookmark":
			if !synced || it.last == nil || *it.last != r.last {
				return fmt.Errorf("attempt %d: FeedBookmark %v at %d (synced %v)", r.attempts, it.last, r.last, synced)
			}
			r.bookmarks++
		default:
			return fmt.Errorf("attempt %d: item %+v", r.attempts, it)
		}
	}
	return nil
}

// testForcedDisconnects appends to one session without pause (on the first server)
// while a WebSocket and an SSE resumer each subscribe, read a few events and cut the
// connection, n times, alternating between servers; then each catches up to the head.
// Every fifth subscription is the contract's stateEvents(afterSequence:), the others
// stateEventFeed, whose FeedSynced every one of them must send.
func testForcedDisconnects(t *testing.T, servers []*server, n int) {
	const key = "agent:main:subagent:feed"
	var (
		stop    atomic.Bool
		writes  atomic.Int64
		writeWG sync.WaitGroup
		werr    error
	)
	writeWG.Go(func() {
		for !stop.Load() {
			ins := []any{}
			for range 1 + rand.IntN(3) {
				ins = append(ins, map[string]any{"sessionKey": key, "kind": "run_completed", "actorType": "agent"})
			}
			// The writer shares the address's query budget with the resumers (ERR-4):
			// a refused batch, which wrote nothing, is sent again after a moment.
			if err := retryLimited(func() error {
				_, err := servers[0].gql(`mutation($ins: [RecordEventInput!]!) { recordEvents(inputs: $ins) { index } }`,
					map[string]any{"ins": ins})
				return err
			}); err != nil {
				werr = err
				return
			}
			writes.Add(int64(len(ins)))
			// Another session's events, which no resumer may see.
			if err := retryLimited(func() error {
				_, err := servers[0].record(map[string]any{"sessionKey": "agent:main:subagent:other", "kind": "run_completed", "actorType": "agent"})
				return err
			}); err != nil {
				werr = err
				return
			}
		}
	})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	resumers := []*resumer{
		{t: t, transport: "websocket", servers: servers, key: key},
		{t: t, transport: "sse", servers: servers, key: key, client: client},
	}
	errs := make([]error, len(resumers))
	var wg sync.WaitGroup
	for i, r := range resumers {
		wg.Go(func() {
			for a := 0; a < n; {
				err := r.attempt(a%5 != 4, rand.IntN(4), stop.Load)
				if rl, ok := errors.AsType[rateLimited](err); ok {
					r.limited++
					time.Sleep(rl.wait)
					continue
				}
				if droppedSlow(err) {
					// The server dropped the subscriber for falling behind, which a loaded
					// machine can make it: the client resumes from its last event, as any
					// cut connection does.
					r.dropped++
					a++
					continue
				}
				if err != nil {
					errs[i] = fmt.Errorf("%s: %w", r.transport, err)
					return
				}
				a++
			}
		})
	}
	wg.Wait()
	stop.Store(true)
	writeWG.Wait()
	if werr != nil {
		t.Fatalf("writer: %v", werr)
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	var st struct {
		SessionStatus struct{ StateVersion int64 } `json:"sessionStatus"`
	}
	servers[0].mustGQL(t, `query($k: String!) { sessionStatus(sessionKey: $k) { stateVersion } }`, map[string]any{"k": key}, &st)
	head := st.SessionStatus.StateVersion
	if head != writes.Load() {
		t.Fatalf("head %d, %d events written", head, writes.Load())
	}
	for _, r := range resumers {
		// Catch up: the replay ends at the head.
		for {
			err := r.attempt(true, 0, func() bool { return true })
			if rl, ok := errors.AsType[rateLimited](err); ok {
				time.Sleep(rl.wait)
				continue
			}
			if err != nil {
				t.Fatalf("%s: catching up: %v", r.transport, err)
			}
			break
		}
		if r.last != head || r.received != head {
			t.Errorf("%s: received %d events up to %d, the head is %d", r.transport, r.received, r.last, head)
		}
		if r.synced != r.feeds {
			t.Errorf("%s: %d of %d feed subscriptions sent FeedSynced", r.transport, r.synced, r.feeds)
		}
		t.Logf("%s: %d forced disconnects (%d stateEventFeed, %d stateEvents), %d events, 0 lost, 0 twice, the longest replay %d events; %d subscriptions refused with RATE_LIMITED and asked again after retryAfterMs; %d dropped as slow and resumed",
			r.transport, r.attempts-1, r.feeds, r.plainResume, r.received, r.maxBacklog, r.limited, r.dropped)
	}
	// Every cut subscription ended on the server.
	for _, s := range servers {
		waitFor(t, wait, "every event subscription of "+s.addr+" ended", func() bool { return subscribers(t, s, "events") == 0 })
	}
}

// subscribers reads the awareness_subscribers gauge of stream, over every transport.
func subscribers(t *testing.T, s *server, stream string) int {
	t.Helper()
	resp, err := s.client.Get(s.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	n := 0
	for line := range strings.Lines(string(raw)) {
		if strings.HasPrefix(line, `awareness_subscribers{stream="`+stream+`"`) {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			n += int(v)
		}
	}
	return n
}

func feedDisconnects() int {
	if testing.Short() {
		return 100
	}
	return 1000
}

// FEED-1, FEED-2, FEED-3 on SQLite: 1,000 forced disconnects over a WebSocket and
// 1,000 over SSE, each resumed from the last sequence received while events are
// appended: no event lost, none received twice, every feed subscription synced.
func TestFeeds_ForcedDisconnectsResume_SQLite_FEED1_FEED2_FEED3(t *testing.T) {
	t.Parallel()
	s := startServer(t, filepath.Join(t.TempDir(), "awareness.db"))
	testForcedDisconnects(t, []*server{s}, feedDisconnects())
}

// The same on PostgreSQL with two processes: the events are appended through the
// first, and the subscriptions alternate between both, so that half of them follow
// the events through the second process's listener.
func TestFeeds_ForcedDisconnectsResume_Postgres_FEED1_FEED2_FEED3(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewDatabase(t)
	a, b := startPGServer(t, dsn), startPGServer(t, dsn)
	testForcedDisconnects(t, []*server{a, b}, feedDisconnects())
}

// testHistoryGap prunes a session's log (--max-rows 5, --prune-interval 1s), then
// resumes a stream below it over a WebSocket and SSE: HISTORY_GAP with the earliest
// available sequence, which sessionStatus agrees with; a resume at that point works.
func testHistoryGap(t *testing.T, s *server) {
	const key = "agent:main:subagent:pruned"
	for range 20 {
		s.mustRecord(t, map[string]any{"sessionKey": key, "kind": "run_completed", "actorType": "agent"})
	}
	var st struct {
		SessionStatus struct {
			StateChanges struct {
				HistoryGap                bool  `json:"historyGap"`
				EarliestAvailableSequence int64 `json:"earliestAvailableSequence"`
			} `json:"stateChanges"`
		} `json:"sessionStatus"`
	}
	waitFor(t, wait, "the pruner pruned the log", func() bool {
		s.mustGQL(t, `query($k: String!) { sessionStatus(sessionKey: $k, changesSince: 0, limit: 1) { stateChanges { historyGap earliestAvailableSequence } } }`,
			map[string]any{"k": key}, &st)
		return st.SessionStatus.StateChanges.HistoryGap
	})
	earliest := st.SessionStatus.StateChanges.EarliestAvailableSequence
	for _, q := range []string{feedQuery, plainQuery} {
		ws, err := openWSFeed(s.wsURL, q, map[string]any{"k": key, "a": 0})
		if err != nil {
			t.Fatal(err)
		}
		sse, err := openSSEFeed(s.client, s.base, q, map[string]any{"k": key}, "1")
		if err != nil {
			t.Fatal(err)
		}
		for name, st := range map[string]feedStream{"websocket": ws, "sse": sse} {
			it, err := st.next()
			if err != nil || it.err == nil || it.err.Extensions["code"] != "HISTORY_GAP" ||
				it.err.Extensions["earliestAvailableSequence"] != float64(earliest) {
				t.Errorf("%s %s: %+v %v, want HISTORY_GAP with earliestAvailableSequence %d", name, firstLine(q), it, err, earliest)
			}
			st.cut()
		}
	}
	r := &resumer{t: t, transport: "sse", servers: []*server{s}, key: key, client: s.client, last: earliest - 1}
	if err := r.attempt(true, 0, func() bool { return true }); err != nil || r.last != 20 {
		t.Fatalf("resuming at the earliest available sequence: %v (last %d)", err, r.last)
	}
}

// FEED-1 on SQLite: a pruned sequence gets HISTORY_GAP.
func TestFeeds_PrunedSequenceHistoryGap_SQLite_FEED1(t *testing.T) {
	t.Parallel()
	s := startServerWith(t, filepath.Join(t.TempDir(), "awareness.db"), serverOpts{args: []string{"--max-rows", "5", "--prune-interval", "1s"}})
	testHistoryGap(t, s)
}

// FEED-1 on PostgreSQL: a pruned sequence gets HISTORY_GAP.
func TestFeeds_PrunedSequenceHistoryGap_Postgres_FEED1(t *testing.T) {
	t.Parallel()
	s := startServerWith(t, pgtest.NewDatabase(t), serverOpts{args: []string{"--max-rows", "5", "--prune-interval", "1s"}})
	testHistoryGap(t, s)
}

// noticeFeedQuery follows a watcher's notices with the feed's markers.
const noticeFeedQuery = `subscription($w: String) { staleNoticeFeed(watcher: $w) { __typename
  ... on StaleNotice { target notifiedVersion } ... on FeedSynced { replayed } ... on FeedBookmark { at } } }`

// testNoticeFeedMarkers: a notice feed sends its pending notices, then FeedSynced
// counting them, then bookmarks while idle (--feed-bookmark 200ms), over a WebSocket
// and SSE; over SSE each notice's id names it.
func testNoticeFeedMarkers(t *testing.T, s *server) {
	const watcher = "agent:main:main"
	for i := range 3 {
		child := fmt.Sprintf("agent:main:subagent:n%d", i)
		s.spawn(t, child, watcher)
		s.humanTurn(t, child)
	}
	ws := dialWS(t, s.wsURL)
	payload, _ := json.Marshal(map[string]any{"query": noticeFeedQuery, "variables": map[string]any{"w": watcher}})
	ws.send(frame{Type: "subscribe", ID: "f", Payload: payload})
	body, _ := json.Marshal(map[string]any{"query": noticeFeedQuery, "variables": map[string]any{"w": watcher}})
	req, _ := http.NewRequest(http.MethodPost, s.base+"/query", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sse := bufio.NewScanner(resp.Body)

	type item struct {
		Typename string `json:"__typename"`
		Target   string `json:"target"`
		N        int64  `json:"notifiedVersion"`
		Replayed int    `json:"replayed"`
	}
	decode := func(where string, raw []byte) item {
		var r struct {
			Data struct {
				Feed item `json:"staleNoticeFeed"`
			} `json:"data"`
		}
		if err := json.Unmarshal(raw, &r); err != nil || r.Data.Feed.Typename == "" {
			t.Fatalf("%s: %s", where, raw)
		}
		return r.Data.Feed
	}
	nextWS := func() item {
		f, _ := ws.nextFrame(wait)
		if f.Type != "next" {
			t.Fatalf("websocket: %s %s", f.Type, f.Payload)
		}
		return decode("websocket", f.Payload)
	}
	nextSSE := func() (item, string) {
		var id, data string
		for sse.Scan() {
			line := sse.Text()
			switch {
			case line == "" && data != "":
				return decode("sse", []byte(data)), id
			case strings.HasPrefix(line, "id: "):
				id = line[len("id: "):]
			case strings.HasPrefix(line, "data: "):
				data = line[len("data: "):]
			}
		}
		t.Fatalf("the SSE stream ended: %v", sse.Err())
		return item{}, ""
	}
	for i := range 3 {
		w := nextWS()
		sv, id := nextSSE()
		if w.Typename != "StaleNotice" || sv != w {
			t.Fatalf("item %d: websocket %+v, sse %+v, want the same pending notice", i, w, sv)
		}
		if want := fmt.Sprintf(`[%q,"main",%q,%d]`, watcher, w.Target, w.N); id != want {
			t.Errorf("SSE id %s, want %s", id, want)
		}
	}
	w := nextWS()
	sv, id := nextSSE()
	if w.Typename != "FeedSynced" || w.Replayed != 3 || sv != w || id != "" {
		t.Fatalf("after the pending notices: websocket %+v, sse %+v (id %q), want FeedSynced of 3 without an id", w, sv, id)
	}
	for range 2 {
		if w := nextWS(); w.Typename != "FeedBookmark" {
			t.Fatalf("idle websocket feed: %+v, want FeedBookmark", w)
		}
		if sv, _ := nextSSE(); sv.Typename != "FeedBookmark" {
			t.Fatalf("idle SSE feed: %+v, want FeedBookmark", sv)
		}
	}
}

// FEED-2, FEED-3 on SQLite.
func TestFeeds_NoticeFeedSyncedAndBookmarks_SQLite_FEED2_FEED3(t *testing.T) {
	t.Parallel()
	testNoticeFeedMarkers(t, startServerWith(t, filepath.Join(t.TempDir(), "awareness.db"), serverOpts{args: []string{"--feed-bookmark", "200ms"}}))
}

// FEED-2, FEED-3 on PostgreSQL.
func TestFeeds_NoticeFeedSyncedAndBookmarks_Postgres_FEED2_FEED3(t *testing.T) {
	t.Parallel()
	testNoticeFeedMarkers(t, startServerWith(t, pgtest.NewDatabase(t), serverOpts{args: []string{"--feed-bookmark", "200ms", "--notice-poll", pgPoll.String()}}))
}

// nodeFeedItem is one item a client of e2e/node/feeds.mjs printed.
type nodeFeedItem struct {
	Typename     string `json:"typename"`
	Sequence     int64  `json:"sequence"`
	LastSequence *int64 `json:"lastSequence"`
}

// FEED-1, FEED-2, FEED-3 with third-party clients and their default options (Apollo
// Client, urql, graphql-ws, graphql-sse; e2e/node/feeds.mjs): each consumes
// stateEventFeed's union (the replay, FeedSynced, live events, bookmarks) and comes
// back after the server restarts. graphql-sse (Last-Event-ID from a headers function)
// and graphql-ws (the payload's afterSequence kept current) resume after the last
// event: nothing again, nothing lost. Apollo and urql resubscribe with their first
// variables and get the replay again, in order, which a client drops by sequence.
func TestFeeds_ThirdPartyClientsConsumeAndResume_FEED1_FEED2_FEED3(t *testing.T) {
	t.Parallel()
	node, dir := nodeClient(t)
	const key = "agent:main:subagent:node-feed"
	s := startServerWith(t, filepath.Join(t.TempDir(), "awareness.db"), serverOpts{args: []string{"--feed-bookmark", "300ms"}})
	for range 3 {
		s.mustRecord(t, map[string]any{"sessionKey": key, "kind": "run_completed", "actorType": "agent"})
	}
	ctx := withTimeout(t, 10*wait)
	cmd := exec.CommandContext(ctx, node, "feeds.mjs", s.base+"/query", s.wsURL, key)
	cmd.Dir = dir
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("node stderr:\n%s", tail(stderr.String(), 4000))
		}
	})
	names := []string{"apollo", "urql", "graphql-ws", "graphql-sse"}
	items := map[string]chan nodeFeedItem{}
	for _, n := range names {
		items[n] = make(chan nodeFeedItem, 1024)
	}
	failed := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f := strings.SplitN(sc.Text(), " ", 4)
			if len(f) < 4 || items[f[0]] == nil {
				failed <- sc.Text()
				continue
			}
			if f[1] == "ERROR" {
				failed <- sc.Text()
				continue
			}
			var it nodeFeedItem
			if err := json.Unmarshal([]byte(f[3]), &it); err != nil {
				failed <- sc.Text()
				continue
			}
			items[f[0]] <- it
		}
	}()
	next := func(name string) nodeFeedItem {
		t.Helper()
		select {
		case it := <-items[name]:
			return it
		case line := <-failed:
			t.Fatalf("feeds.mjs: %s", line)
		case <-time.After(3 * wait):
			t.Fatalf("%s: no item within %v", name, 3*wait)
		}
		return nodeFeedItem{}
	}
	// nextEvent skips bookmarks (each naming the last sequence) up to an event or
	// FeedSynced.
	last := map[string]int64{}
	nextItem := func(name string) nodeFeedItem {
		t.Helper()
		for {
			it := next(name)
			if it.Typename != "FeedBookmark" {
				return it
			}
			if it.LastSequence == nil || *it.LastSequence != last[name] {
				t.Fatalf("%s: bookmark %v, the last event received %d", name, it.LastSequence, last[name])
			}
		}
	}
	expect := func(name, typename string, seq int64) {
		t.Helper()
		it := nextItem(name)
		got := it.Sequence
		if it.LastSequence != nil {
			got = *it.LastSequence
		}
		if it.Typename != typename || got != seq {
			t.Fatalf("%s: %+v (lastSequence %v), want %s %d", name, it, it.LastSequence, typename, seq)
		}
		if typename == "StateEvent" {
			last[name] = seq
		}
	}
	for _, n := range names {
		for seq := int64(1); seq <= 3; seq++ {
			expect(n, "StateEvent", seq)
		}
		expect(n, "FeedSynced", 3)
	}
	s.mustRecord(t, map[string]any{"sessionKey": key, "kind": "run_completed", "actorType": "agent"})
	for _, n := range names {
		expect(n, "StateEvent", 4)
		if it := next(n); it.Typename != "FeedBookmark" || it.LastSequence == nil || *it.LastSequence != 4 {
			t.Fatalf("%s idle: %+v, want a FeedBookmark at 4", n, it)
		}
	}

	s = restartServer(t, s, syscall.SIGTERM)
	s.mustRecord(t, map[string]any{"sessionKey": key, "kind": "run_completed", "actorType": "agent"})
	for _, n := range names {
		resumes := n == "graphql-ws" || n == "graphql-sse"
		for last[n] < 5 {
			it := nextItem(n)
			switch {
			case it.Typename == "FeedSynced":
			case it.Typename == "StateEvent" && it.Sequence == last[n]+1:
				last[n] = it.Sequence
			case it.Typename == "StateEvent" && it.Sequence <= last[n] && !resumes:
				// Apollo's and urql's resubscription replays from afterSequence 0.
			default:
				t.Fatalf("%s after the restart: %+v with %d received", n, it, last[n])
			}
		}
	}
}

// FEED-1, FEED-2, FEED-3 with the Go client: client.EventFeed over a WebSocket and
// over SSE follows one session across restarts of the service (SIGKILL and SIGTERM in
// turn), on SQLite and PostgreSQL, and hands out every event once, in order, each
// (re)subscription's replay closed by a Synced marker.
func TestClient_EventFeedAcrossRestarts_FEED1_FEED2_FEED3(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db := b.db(t)
			// Bookmarks every 200ms wake a reader that waits past the last event.
			args := []string{"--feed-bookmark", "200ms", "--notice-poll", pgPoll.String()}
			s := startServerWith(t, db, serverOpts{args: args})
			c, err := client.New(s.base + "/query")
			if err != nil {
				t.Fatal(err)
			}
			const key = "agent:main:subagent:go-feed"
			zero := int64(0)
			type reader struct {
				name   string
				feed   *client.EventFeed
				events []int64
				synced atomic.Int64
			}
			readers := []*reader{}
			for _, tr := range []client.Transport{client.TransportWebSocket, client.TransportSSE} {
				readers = append(readers, &reader{name: tr.String(), feed: c.Events(client.EventFeedOptions{
					Target: client.Target{SessionKey: key}, AfterSequence: &zero, Transport: tr,
					MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})})
			}
			var target atomic.Int64 // the last sequence written, once the writes are done
			ctx, cancel := context.WithTimeout(context.Background(), 10*wait)
			defer cancel()
			errs := make([]error, len(readers))
			var wg sync.WaitGroup
			for i, r := range readers {
				wg.Go(func() {
					defer r.feed.Close()
					for {
						it, err := r.feed.Next(ctx)
						if err != nil {
							errs[i] = fmt.Errorf("%s: %w", r.name, err)
							return
						}
						switch {
						case it.Event != nil:
							r.events = append(r.events, it.Event.Sequence)
						case it.Synced:
							r.synced.Add(1)
						}
						if last, _ := r.feed.LastSequence(); last > 0 && last == target.Load() {
							return
						}
					}
				})
			}
			var written int64
			record := func() {
				for range 5 {
					written = s.mustRecord(t, map[string]any{"sessionKey": key, "kind": "run_completed", "actorType": "agent"}).StateVersion
				}
			}
			// Every reader lives through every restart: each round starts once every reader
			// has (re)subscribed to the server it is about to stop (its Synced marker).
			counts := func() []int64 {
				out := make([]int64, len(readers))
				for i, r := range readers {
					out[i] = r.synced.Load()
				}
				return out
			}
			syncedAfter := func(prev []int64) {
				t.Helper()
				waitFor(t, wait, "every reader (re)subscribed", func() bool {
					for i, r := range readers {
						if r.synced.Load() <= prev[i] {
							return false
						}
					}
					return true
				})
			}
			syncedAfter(make([]int64, len(readers)))
			for round := range 6 {
				record()
				prev := counts()
				if round%2 == 0 {
					s.kill()
				} else {
					s.stop(syscall.SIGTERM)
				}
				s = startServerAt(t, db, s.addr, args...)
				syncedAfter(prev)
			}
			record()
			target.Store(written)
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			for _, r := range readers {
				if int64(len(r.events)) != written {
					t.Errorf("%s: %d events, %d written", r.name, len(r.events), written)
				}
				for i, seq := range r.events {
					if seq != int64(i+1) {
						t.Fatalf("%s: event %d is sequence %d", r.name, i, seq)
					}
				}
				if n := r.synced.Load(); n < 7 {
					t.Errorf("%s: %d Synced markers across 6 restarts, want one per (re)subscription, 7 at least", r.name, n)
				}
				t.Logf("%s: %d events in order across 6 restarts, %d (re)subscriptions synced", r.name, len(r.events), r.synced.Load())
			}
		})
	}
}
