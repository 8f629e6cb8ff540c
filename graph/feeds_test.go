package graph

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/models"
)

// sseEvent is one event of an SSE stream: its type, id (with hasID) and data.
type sseEvent struct {
	event, id, data string
	hasID           bool
}

// openSSEStream POSTs query with Accept: text/event-stream (and Last-Event-ID when
// lastID is not empty) and returns the stream's events, read on a goroutine.
func openSSEStream(t *testing.T, url, query, lastID string) <-chan sseEvent {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query})
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	out := make(chan sseEvent, 256)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.event != "" {
					out <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "event: "):
				ev.event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "id: "):
				ev.id, ev.hasID = strings.TrimPrefix(line, "id: "), true
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return out
}

func nextSSE(t *testing.T, c <-chan sseEvent) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-c:
		if !ok {
			t.Fatal("the SSE stream ended")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no SSE event within 10s")
	}
	return sseEvent{}
}

// FEED-2, FEED-3: the feed subscriptions carry, frame by frame, the same payload
// bytes on the WebSocket push path (the fast path's union writer), on gqlgen's own
// execution (the relay path, without the fast path) and over SSE, for notices, events
// and markers, every member selected or not, with aliases and fragments. The SSE
// events carry their ids: a notice's [watcher, targetAgentId, target, N(, "closed")],
// an event's and a marker's sequence on a feed of one session, none otherwise.
func TestFeedStreamsMatchGqlgen_FEED2_FEED3(t *testing.T) {
	ctx := context.Background()
	store, err := models.OpenSQLite(ctx, filepath.Join(t.TempDir(), "awareness.db"), models.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hub := awareness.NewHub()
	t.Cleanup(func() { hub.Close(); store.Close() })
	clock := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)
	svc := awareness.NewService(awareness.Config{Store: store, Hub: hub, Now: func() time.Time { return clock }})
	fastH, fp := newHandler(Config{Service: svc})
	fastSrv := httptest.NewServer(fastH)
	plainSrv := httptest.NewServer(NewHandler(Config{Service: svc, gqlgenEventPages: true}))
	t.Cleanup(fastSrv.Close)
	t.Cleanup(plainSrv.Close)

	const main, s1, s2 = "agent:main:main", "agent:main:subagent:s1", "agent:main:subagent:s2"
	record := func(key string, kind awareness.EventKind, watchers ...string) {
		t.Helper()
		actor := "+15550100"
		if _, err := svc.RecordEvent(ctx, awareness.RecordInput{SessionKey: key, Kind: kind, ActorType: awareness.ActorHuman,
			ActorID: &actor, Watchers: watchers}); err != nil {
			t.Fatal(err)
		}
	}
	record(s1, awareness.ChildSpawned, main)
	record(s1, awareness.HumanDirectMessage) // pending before the feeds start

	type feed struct {
		query string
		items int
		ids   []string // the SSE ids, "-" for none
	}
	feeds := map[string]feed{
		"notices": {`subscription { staleNoticeFeed(watcher: "agent:main:main", includeClosed: true) { __typename
  ... on StaleNotice { watcher target notifiedVersion closed text } ... on FeedSynced { lastSequence replayed at }
  ... on FeedBookmark { lastSequence at } } }`, 5,
			[]string{`["agent:main:main","main","agent:main:subagent:s1",2]`, "-", `["agent:main:main","main","agent:main:subagent:s2",1]`, "-",
				`["agent:main:main","main","agent:main:subagent:s1",2,"closed"]`}},
		"notices aliased": {`subscription { f: staleNoticeFeed { ...N ... on FeedBookmark { b: at } } }
fragment N on StaleNotice { t: text __typename }`, 4, nil},
		"events of s1": {`subscription { stateEventFeed(sessionKey: "agent:main:subagent:s1", afterSequence: 0) { __typename
  ... on StateEvent { sequence kind summary payload } ... on FeedSynced { lastSequence replayed } ... on FeedBookmark { lastSequence } } }`, 4,
			[]string{"1", "2", "2", "2"}},
		"events": {`subscription { stateEventFeed { ... on StateEvent { sequence sessionKey }
  ... on FeedSynced { lastSequence s2: lastSequence replayed at __typename } } }`, 3, []string{"-", "-", "-"}},
		"typename": {`subscription { stateEventFeed(sessionKey: "agent:main:subagent:s2") { __typename } }`, 3, []string{"0", "1", "1"}},
	}
	type conns struct {
		fast, plain *websocket.Conn
		sse         <-chan sseEvent
	}
	open := map[string]conns{}
	for name, f := range feeds {
		open[name] = conns{subscribe(t, fastSrv.URL, f.query), subscribe(t, plainSrv.URL, f.query), openSSEStream(t, fastSrv.URL+"/query", f.query, "")}
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		n, e := hub.Subscribers()
		if n == 6 && e == 9 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hub has %d notice and %d event subscribers, want 6 and 9", n, e)
		}
		time.Sleep(5 * time.Millisecond)
	}
	before := fp.ItemsWritten()
	record(s2, awareness.HumanDirectMessage, main) // a notice, an event
	svc.Flush()
	hub.Bookmark(clock.Add(time.Minute)) // everyone sent something since the start
	hub.Bookmark(clock.Add(time.Minute)) // everyone idle: a bookmark each
	if _, err := svc.AckNotices(ctx, main, nil, nil, []awareness.NoticeRef{{Target: s1, NotifiedVersion: 2}}); err != nil {
		t.Fatal(err)
	}

	for name, f := range feeds {
		c := open[name]
		for i := range f.items {
			got, exp := nextPayload(t, c.fast), nextPayload(t, c.plain)
			if !bytes.Equal(got, exp) {
				t.Errorf("%s item %d:\nfast path: %s\ngqlgen:    %s", name, i, got, exp)
			}
			ev := nextSSE(t, c.sse)
			if ev.event != "next" || ev.data != string(exp) {
				t.Errorf("%s item %d over SSE: %s %s, want next %s", name, i, ev.event, ev.data, exp)
			}
			if f.ids != nil {
				id := ev.id
				if !ev.hasID {
					id = "-"
				}
				if id != f.ids[i] {
					t.Errorf("%s item %d: SSE id %q, want %q (%s)", name, i, id, f.ids[i], exp)
				}
			}
			if strings.Contains(string(exp), `"errors"`) {
				t.Errorf("%s item %d: %s", name, i, exp)
			}
		}
	}
	if fp.ItemsWritten() == before {
		t.Error("the fast path wrote no feed item")
	}
}
