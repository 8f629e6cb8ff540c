package graph

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/awareness/awareness/graph/fastpath"
	"github.com/awareness/awareness/graph/generated"
	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/models"
)

// REC-1, NTC-7: the differential test of the fast path (package fastpath). Each input
// is turned into random selection sets over StateEvent (a sessionStatus page, written
// straight from the rows the store reads, and the
// stateEvents subscription) and StaleNotice (staleNotices): fields, aliases (some
// spelled as other fields' names), __typename, repeated fields, inline fragments with
// and without a type condition, named fragments (nested, spread twice), @skip and
// @include on fields, fragments and the events field itself, from variables and
// literals; a second, differently selected page; and into rows: recorded events with
// optional fields present or absent and unicode, quotes, backslashes and HTML in their
// text and payload, and items published straight to the hub that gqlgen nulls or
// blanks (no time, an unknown kind or actor type, invalid UTF-8, times in another
// zone). The same operation runs on a handler with the fast path and on one without
// it; every response and every subscription frame must be the same JSON value (member
// order included), and the fast path must have written every page and item.
//
// go test runs the seeds (hand-picked and pseudo-random) as a normal test; explore
// with go test -run '^$' -fuzz FuzzFastPathMatchesGqlgen ./graph/.
func FuzzFastPathMatchesGqlgen(f *testing.F) {
	for _, s := range []string{"", "\x00", "\xff\xff\xff\xff", "all fields please", "\x07\x08\x09\x07\x08\x09\x07\x08\x09"} {
		f.Add([]byte(s))
	}
	rng := rand.New(rand.NewPCG(18, 4))
	for range 150 {
		b := make([]byte, 16+rng.IntN(200))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		f.Add(b)
	}
	h := newDiffHarness(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		h.run(t, newSource(data))
	})
}

// diffHarness is one service with two handlers, the fast path on and off, and one
// WebSocket connection to each, kept across inputs.
type diffHarness struct {
	svc             *awareness.Service
	hub             *awareness.Hub
	fast, plain     *httptest.Server
	fp              *fastpath.FastPath
	fastWS, plainWS *websocket.Conn
	round           int
	// recFast and recPlain answer recordEvent over two services with the same clock
	// and their own databases, which the same mutations keep identical.
	recFast, recPlain http.Handler
	recFP             *fastpath.FastPath
}

func newDiffHarness(f *testing.F) *diffHarness {
	ctx := context.Background()
	store, err := models.OpenSQLite(ctx, filepath.Join(f.TempDir(), "awareness.db"), models.Options{})
	if err != nil {
		f.Fatal(err)
	}
	hub := awareness.NewHub()
	f.Cleanup(func() { hub.Close(); store.Close() })
	svc := awareness.NewService(awareness.Config{Store: store, Hub: hub})
	// No pings: a long fuzzing run reads the connections only while it compares.
	fastH, fp := newHandler(Config{Service: svc, WSPingPongInterval: time.Hour})
	h := &diffHarness{
		svc: svc, hub: hub, fp: fp,
		fast:  httptest.NewServer(fastH),
		plain: httptest.NewServer(NewHandler(Config{Service: svc, WSPingPongInterval: time.Hour, gqlgenEventPages: true})),
	}
	f.Cleanup(h.fast.Close)
	f.Cleanup(h.plain.Close)
	now := time.Now()
	var recSvc [2]*awareness.Service
	for i := range recSvc {
		st, err := models.OpenSQLite(ctx, filepath.Join(f.TempDir(), "record.db"), models.Options{})
		if err != nil {
			f.Fatal(err)
		}
		f.Cleanup(func() { st.Close() })
		recSvc[i] = awareness.NewService(awareness.Config{Store: st, Now: func() time.Time { return now }})
		f.Cleanup(recSvc[i].Hub().Close)
	}
	h.recFast, h.recFP = newHandler(Config{Service: recSvc[0]})
	h.recPlain = NewHandler(Config{Service: recSvc[1], gqlgenEventPages: true})
	h.fastWS, h.plainWS = dialInit(f, h.fast.URL), dialInit(f, h.plain.URL)
	return h
}

func dialInit(f *testing.F, base string) *websocket.Conn {
	d := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}, HandshakeTimeout: 5 * time.Second}
	c, _, err := d.Dial("ws"+strings.TrimPrefix(base, "http")+"/query", nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { c.Close() })
	if err := c.WriteJSON(map[string]any{"type": "connection_init"}); err != nil {
		f.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var ack wsFrame
	if err := c.ReadJSON(&ack); err != nil || ack.Type != "connection_ack" {
		f.Fatalf("got %+v (%v), want connection_ack", ack, err)
	}
	return c
}

func (h *diffHarness) run(t *testing.T, src *source) {
	h.round++
	ctx := context.Background()
	r := h.round
	session := "agent:main:subagent:fzp" + strconv.Itoa(r)

	// The page: a few recorded events (an input the service refuses is left out).
	recorded := 0
	for range 1 + src.n(4) {
		if _, err := h.svc.RecordEvent(ctx, src.recordInput(session)); err == nil {
			recorded++
		} else {
			t.Log(err)
		}
	}
	q, vars := src.pageQuery(recorded)
	vars["k"] = session
	before, streamedBefore := h.fp.PagesWritten(), h.fp.PagesStreamed()
	got, want := post(t, h.fast.Config.Handler, q, vars), post(t, h.plain.Config.Handler, q, vars)
	if bytes.Contains(want, []byte(`"errors"`)) {
		t.Fatalf("gqlgen refused the generated query (the generator is wrong):\n%s\nvariables %v\n%s", q, vars, want)
	}
	sameJSON(t, "page", q, vars, got, want)
	if lists, written := countLists(t, want), h.fp.PagesWritten()-before; written != int64(lists) {
		t.Errorf("the fast path wrote %d pages of the %d in the response of\n%s\nvariables %v\n%s", written, lists, q, vars, want)
	}
	// Every generated call selects one stateChanges with one events key, so each page
	// is written straight from the rows (fastpath's pageSink), none from []Event.
	if lists, streamed := countLists(t, want), h.fp.PagesStreamed()-streamedBefore; streamed != int64(lists) {
		t.Errorf("the fast path streamed %d pages of the %d in the response of\n%s\nvariables %v\n%s", streamed, lists, q, vars, want)
	}

	// A recordEvent answer, on the two services kept identical.
	rq, rvars := src.recordMutation(r)
	resultsBefore := h.recFP.ResultsWritten()
	got, want = post(t, h.recFast, rq, rvars), post(t, h.recPlain, rq, rvars)
	sameJSON(t, "recordEvent", rq, rvars, got, want)
	if written := h.recFP.ResultsWritten() - resultsBefore; !bytes.Contains(want, []byte(`"errors"`)) && written != 1 {
		t.Errorf("the fast path wrote %d answers to\n%s\nvariables %v\n%s", written, rq, rvars, want)
	}

	// The subscriptions: one of each on both connections, then items published to the
	// hub that only they receive.
	watcher := "agent:main:subagent:fzw" + strconv.Itoa(r)
	stream := "agent:main:subagent:fzs" + strconv.Itoa(r)
	nq, nvars := src.subscription("StaleNotice", "staleNotices(watcher: $w, includeClosed: true)", "$w: String!")
	nvars["w"] = watcher
	eq, evars := src.subscription("StateEvent", "stateEvents(sessionKey: $k)", "$k: String!")
	evars["k"] = stream
	baseN, baseE := h.hub.Subscribers()
	nid, eid := "n"+strconv.Itoa(r), "e"+strconv.Itoa(r)
	for _, c := range []*websocket.Conn{h.fastWS, h.plainWS} {
		for _, s := range []struct {
			id, q string
			vars  map[string]any
		}{{nid, nq, nvars}, {eid, eq, evars}} {
			if err := c.WriteJSON(map[string]any{"type": "subscribe", "id": s.id,
				"payload": map[string]any{"query": s.q, "variables": s.vars}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer func() {
		for _, c := range []*websocket.Conn{h.fastWS, h.plainWS} {
			for _, id := range []string{nid, eid} {
				_ = c.WriteJSON(map[string]any{"type": "complete", "id": id})
			}
		}
		waitSubscribers(t, h.hub, baseN, baseE)
	}()
	waitSubscribers(t, h.hub, baseN+2, baseE+2)

	notices := src.notices(watcher)
	events := src.events(stream)
	itemsBefore := h.fp.ItemsWritten()
	h.hub.PublishNotices(notices...)
	h.hub.PublishEvents(events...)
	want2 := map[string]int{nid: len(notices), eid: len(events)}
	fastFrames, plainFrames := collect(t, h.fastWS, want2), collect(t, h.plainWS, want2)
	for id, q := range map[string]string{nid: nq, eid: eq} {
		vars := nvars
		if id == eid {
			vars = evars
		}
		for i := range fastFrames[id] {
			sameJSON(t, fmt.Sprintf("subscription item %d", i), q, vars, fastFrames[id][i], plainFrames[id][i])
		}
	}
	if written, n := h.fp.ItemsWritten()-itemsBefore, len(notices)+len(events); written != int64(n) {
		t.Errorf("the fast path wrote %d of the %d subscription items of\n%s\n%s", written, n, nq, eq)
	}
}

// waitSubscribers waits until the hub counts the given subscriptions.
func waitSubscribers(t *testing.T, hub *awareness.Hub, notices, events int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		n, e := hub.Subscribers()
		if n == notices && e == events {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("hub has %d notice and %d event subscribers, want %d and %d", n, e, notices, events)
		}
		time.Sleep(time.Millisecond)
	}
}

// collect reads next frames until it has want[id] of each subscription id.
func collect(t *testing.T, c *websocket.Conn, want map[string]int) map[string][]json.RawMessage {
	t.Helper()
	got := map[string][]json.RawMessage{}
	missing := 0
	for _, n := range want {
		missing += n
	}
	for missing > 0 {
		f := readFrame(t, c)
		if _, ours := want[f.ID]; !ours && f.Type == "complete" {
			continue // a subscription of an earlier input, completed by the client
		}
		if f.Type != "next" {
			t.Fatalf("got %s frame for %q: %s", f.Type, f.ID, f.Payload)
		}
		if len(got[f.ID]) >= want[f.ID] {
			t.Fatalf("unexpected frame for %q: %s", f.ID, f.Payload)
		}
		got[f.ID] = append(got[f.ID], f.Payload)
		missing--
	}
	return got
}

// sameJSON fails unless got and want are the same JSON value, member order included
// (a GraphQL response orders its members as the selection does), and then unless they
// are the same bytes (the fast path's promise: strings escaped as gqlgen escapes them).
func sameJSON(t *testing.T, what, query string, vars map[string]any, got, want []byte) {
	t.Helper()
	cg, err := canonical(got)
	if err != nil {
		t.Fatalf("%s: fast path wrote invalid JSON (%v): %s", what, err, got)
	}
	cw, err := canonical(want)
	if err != nil {
		t.Fatalf("%s: gqlgen wrote invalid JSON (%v): %s", what, err, want)
	}
	switch {
	case cg != cw:
		t.Errorf("%s of\n%s\nvariables %v\nfast path: %s\ngqlgen:    %s", what, query, vars, got, want)
	case !bytes.Equal(got, want):
		t.Errorf("%s of\n%s\nvariables %v: the same JSON, spelled differently\nfast path: %q\ngqlgen:    %q",
			what, query, vars, got, want)
	}
}

// canonical spells a JSON text as its token sequence: strings unescaped and quoted
// again, numbers as written, whitespace dropped, member order kept.
func canonical(b []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var out strings.Builder
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return out.String(), nil
		}
		if err != nil {
			return "", err
		}
		switch v := tok.(type) {
		case json.Delim:
			out.WriteString(v.String())
		case string:
			out.WriteString(strconv.Quote(v))
		case json.Number:
			out.WriteString(v.String())
		case bool:
			out.WriteString(strconv.FormatBool(v))
		case nil:
			out.WriteString("null")
		}
		out.WriteByte(' ')
	}
}

// countLists counts the lists in a response: in the generated page queries, the
// events pages and nothing else.
func countLists(t *testing.T, b []byte) int {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	n := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return n
		}
		if err != nil {
			t.Fatal(err)
		}
		if tok == json.Delim('[') {
			n++
		}
	}
}

// source draws choices from a fuzz input, and past its end from a generator seeded
// by the input (so that a short input still makes a whole case).
type source struct {
	data []byte
	i    int
	rest *rand.Rand
}

func newSource(data []byte) *source {
	h := fnv.New64a()
	h.Write(data)
	return &source{data: data, rest: rand.New(rand.NewPCG(h.Sum64(), uint64(len(data))))}
}

func (s *source) byte() byte {
	if s.i >= len(s.data) {
		return byte(s.rest.Uint32())
	}
	s.i++
	return s.data[s.i-1]
}

// n returns a choice in [0, k).
func (s *source) n(k int) int { return int(s.byte()) % k }

func (s *source) bool() bool { return s.n(2) == 1 }

func (s *source) int64() int64 {
	var v int64
	for range 1 + s.n(8) {
		v = v<<8 | int64(s.byte())
	}
	if s.bool() {
		v = -v
	}
	return v
}

// texts needing every escape the writers know, and none.
var texts = []string{
	"", "plain", `quote " backslash \ slash /`, "é漢字🙂 ünïcödé", "tab\there", "line\nbreak\r", "\x00\x01\x1f\x7f",
	"<b>&amp;</b>", "\u2028\u2029", "bad\xffutf8\xc3", "\U0010ffff", strings.Repeat("ü", 70), "null", "{}",
}

// text returns one of texts or a string of the input's bytes; valid only when asked
// for (stored text must be valid UTF-8).
func (s *source) text(valid bool) string {
	var v string
	if k := s.n(len(texts) + 2); k < len(texts) {
		v = texts[k]
	} else {
		b := make([]byte, s.n(24))
		for i := range b {
			b[i] = s.byte()
		}
		v = string(b)
	}
	if valid && !utf8.ValidString(v) {
		return strings.ToValidUTF8(v, "?")
	}
	return v
}

// optText returns nil or a text the service stores: one line without control
// characters, not empty, at most 60 bytes.
func (s *source) optText() *string {
	if s.bool() {
		return nil
	}
	v := strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == 0x2028 || r == 0x2029 || (r >= 0x80 && r < 0xa0) {
			return ' '
		}
		return r
	}, s.text(true))
	for len(v) > 60 {
		_, size := utf8.DecodeLastRuneInString(v)
		v = v[:len(v)-size]
	}
	if v = strings.TrimSpace(v); v == "" {
		v = "x"
	}
	return &v
}

var (
	eventKinds = []awareness.EventKind{awareness.HumanDirectMessage, awareness.UpstreamMissing, awareness.GoalChanged,
		awareness.ChildSpawned, awareness.RunCompleted, awareness.RunFailed, awareness.Compacted, awareness.Adopted}
	actorTypes = []awareness.ActorType{awareness.ActorHuman, awareness.ActorAgent, awareness.ActorSystem}
	outcomes   = []awareness.RunOutcome{awareness.OutcomeCancelled, awareness.OutcomeTimeout, awareness.OutcomeError}
)

func (s *source) recordInput(session string) awareness.RecordInput {
	in := awareness.RecordInput{
		SessionKey: session,
		Kind:       eventKinds[s.n(len(eventKinds))],
		ActorType:  actorTypes[s.n(len(actorTypes))],
		ActorID:    s.optText(),
		Summary:    s.optText(),
		RunID:      s.optText(),
		Channel:    s.optText(),
	}
	if in.Kind == awareness.RunFailed && s.bool() {
		o := outcomes[s.n(len(outcomes))]
		in.Outcome = &o
	}
	if s.bool() {
		turns := 1 + s.n(50)
		in.Turns = &turns
	}
	if s.bool() {
		at := time.Now().Add(-time.Duration(s.n(200)) * time.Minute).Add(time.Duration(s.int64() % 1e9))
		in.OccurredAt = &at
	}
	return in
}

// when returns a time, in UTC or another zone, or the zero time when zero allows.
func (s *source) when(zero bool) time.Time {
	if zero && s.n(4) == 0 {
		return time.Time{}
	}
	t := time.Unix(1_700_000_000+int64(s.n(250))*86400, int64(s.n(250))*4_000_037)
	if s.bool() {
		t = t.In(time.FixedZone("x", (1+s.n(12))*1800*(1-2*s.n(2))))
	}
	return t
}

func (s *source) notices(watcher string) []awareness.Notice {
	ns := make([]awareness.Notice, 1+s.n(4))
	for i := range ns {
		ns[i] = awareness.Notice{
			Watcher:         watcher,
			Target:          awareness.SessionRef{AgentID: s.text(false), Key: s.text(false)},
			ChangesSince:    s.int64()*8 + int64(i), // distinct IDs: none is a repeat
			NotifiedVersion: s.int64(),
			MaterialVersion: s.int64(),
			Text:            s.text(false),
			Wake:            s.bool(),
			OpenedAt:        s.when(true),
			Closed:          s.bool(),
		}
	}
	return ns
}

func (s *source) events(session string) []awareness.Event {
	ref, err := awareness.ResolveSession(session, nil)
	if err != nil {
		panic(err)
	}
	es := make([]awareness.Event, 1+s.n(4))
	for i := range es {
		kind := awareness.EventKind("bogus")
		if s.n(6) > 0 {
			kind = eventKinds[s.n(len(eventKinds))]
		}
		actor := awareness.ActorType("robot")
		if s.n(6) > 0 {
			actor = actorTypes[s.n(len(actorTypes))]
		}
		es[i] = awareness.Event{
			Session: ref, Sequence: s.int64(), Kind: kind, ActorType: actor,
			ActorID: s.text(false), Summary: s.text(false), OccurredAt: s.when(true), RunID: s.text(false),
			Payload: awareness.Payload{Outcome: awareness.RunOutcome(s.text(false)), Channel: s.text(false), Turns: int(s.int64() % 1000)},
		}
	}
	return es
}

// pageQuery returns a sessionStatus query over $k with one or two pages, and its
// variables (but $k).
func (s *source) pageQuery(recorded int) (string, map[string]any) {
	d := newDocument(s)
	vars := map[string]any{}
	switch k := s.n(recorded + 2); {
	case k == 0:
		vars["s"] = nil // no page
	default:
		vars["s"] = k - 1
	}
	events := func(prefix string) string {
		sel := d.selection("StateEvent", prefix)
		field := []string{"", "ev: ", "events: "}[s.n(3)]
		set, _ := sel.set(0)
		out := field + "events" + d.directives() + " { " + set + " }"
		if s.n(4) == 0 { // the same field again: gqlgen merges the two selections
			set, _ := sel.set(0)
			out += " " + field + "events { " + set + " }"
		}
		return out
	}
	// limit: pages of 1 to 5 events (some truncated), and a cost within CostBudget.
	limit := func() string { return ", limit: " + strconv.Itoa(1+s.n(5)) }
	body := []string{[]string{"", "a: ", "sessionStatus: "}[s.n(3)] +
		"sessionStatus(sessionKey: $k, changesSince: $s" + limit() + ") { stateVersion stateChanges { __typename " +
		events("P") + " truncated nextChangesSince } }"}
	if s.bool() {
		body = append(body, "b: sessionStatus(sessionKey: $k, changesSince: "+strconv.Itoa(s.n(recorded+1))+limit()+
			") { __typename stateChanges { "+events("Q")+" } }")
	}
	return d.operation("query", "$k: String!, $s: Int", body), d.fill(vars)
}

// recordMutation returns a recordEvent mutation with a random selection and an input
// (some deduplicated, some with watchers that are skipped) as its variables.
func (s *source) recordMutation(round int) (string, map[string]any) {
	in := s.recordInput("agent:main:subagent:fzr")
	input := map[string]any{"sessionKey": in.SessionKey, "kind": in.Kind, "actorType": in.ActorType,
		"actorId": in.ActorID, "summary": in.Summary, "runId": in.RunID, "channel": in.Channel,
		"outcome": in.Outcome, "turns": in.Turns}
	if in.OccurredAt != nil {
		input["occurredAt"] = in.OccurredAt.Format(time.RFC3339Nano)
	}
	if s.n(3) == 0 {
		input["dedupeKey"] = "dk" + strconv.Itoa(s.n(3))
	}
	if s.bool() {
		input["watchers"] = []string{"agent:main:main", "agent:main:subagent:fzr", "main", "agent:x:w" + strconv.Itoa(round)}[:1+s.n(4)]
	}
	d := newDocument(s)
	top, _ := d.selection("RecordEventResult", "R").set(0)
	ev, _ := d.selection("StateEvent", "E").set(0)
	sel := top + " " + []string{"", "ev: "}[s.n(2)] + "event" + d.directives() + " { " + ev + " }"
	if s.bool() {
		sw, _ := d.selection("SkippedWatcher", "W").set(0)
		sel += " skippedWatchers { " + sw + " }"
	}
	body := []string{[]string{"", "r: "}[s.n(2)] + "recordEvent(input: $in) { " + sel + " }"}
	return d.operation("mutation", "$in: RecordEventInput!", body), d.fill(map[string]any{"in": input})
}

// subscription returns a subscription to field (with its arguments) selecting over
// typ, and its variables (but the field's own).
func (s *source) subscription(typ, field, params string) (string, map[string]any) {
	d := newDocument(s)
	alias := []string{"", "item: ", "x: "}[s.n(3)]
	set, _ := d.selection(typ, "F").set(0)
	body := []string{alias + field + " { " + set + " }"}
	return d.operation("subscription", params, body), d.fill(map[string]any{})
}

// document is one operation being generated: its fragments and boolean variables.
type document struct {
	s     *source
	frags []string
	vars  []string // names of the boolean variables used, in order
	used  map[string]bool
	size  int // fields so far, fragments expanded
}

// maxDocumentFields bounds a document's fields, fragments expanded, well within the
// handler's limits (MaxExpandedSelections, MaxIdenticalFields, CostBudget).
const maxDocumentFields = 60

func newDocument(s *source) *document { return &document{s: s, used: map[string]bool{}} }

func (d *document) operation(kind, params string, body []string) string {
	for _, v := range d.vars {
		params += ", $" + v + ": Boolean!"
	}
	return kind + " Op(" + params + ") {\n  " + strings.Join(body, "\n  ") + "\n}\n" + strings.Join(d.frags, "\n")
}

// fill sets a value for every boolean variable used.
func (d *document) fill(vars map[string]any) map[string]any {
	for _, v := range d.vars {
		vars[v] = d.s.bool()
	}
	return vars
}

func (d *document) variable() string {
	v := "v" + strconv.Itoa(d.s.n(3))
	if !d.used[v] {
		d.used[v] = true
		d.vars = append(d.vars, v)
	}
	return "$" + v
}

// directives returns none, @skip, @include or both, from variables or literals.
func (d *document) directives() string {
	switch d.s.n(6) {
	case 1:
		return " @skip(if: " + d.variable() + ")"
	case 2:
		return " @include(if: " + d.variable() + ")"
	case 3:
		return " @include(if: " + strconv.FormatBool(d.s.bool()) + ")"
	case 4:
		return " @skip(if: " + d.variable() + ") @include(if: " + d.variable() + ")"
	}
	return ""
}

// typeFields are the fields a selection picks from: every leaf field the executable
// schema gives the type, and __typename. A field added to the schema is fuzzed at once,
// and the fast path must write it (or decline the selection) like gqlgen.
var typeFields = map[string][]string{"StateEvent": leafFields("StateEvent"), "StaleNotice": leafFields("StaleNotice"),
	"RecordEventResult": leafFields("RecordEventResult"), "SkippedWatcher": leafFields("SkippedWatcher")}

func leafFields(typ string) []string {
	schema := generated.NewExecutableSchema(generated.Config{}).Schema()
	var out []string
	for _, f := range schema.Types[typ].Fields {
		if strings.HasPrefix(f.Name, "__") || len(f.Arguments) > 0 {
			continue
		}
		if k := schema.Types[f.Type.Name()].Kind; k == ast.Scalar || k == ast.Enum {
			out = append(out, f.Name)
		}
	}
	return append(out, "__typename")
}

// selection generates the selection sets of one merged object (its response keys are
// shared by every fragment in it).
type selection struct {
	d      *document
	typ    string
	prefix string
	keys   map[string]string // response key → field
	counts map[string]int    // field → times selected, fragments expanded
	plain  bool              // fields only, no fragment or directive (what clients send most)
}

// maxIdentical bounds the selections of one field in a merged set, below
// MaxIdenticalFields.
const maxIdentical = 8

func (d *document) selection(typ, prefix string) *selection {
	return &selection{d: d, typ: typ, prefix: prefix, keys: map[string]string{}, counts: map[string]int{},
		plain: d.s.n(3) == 0}
}

// set returns a selection set and how many times it selects each field, fragments
// expanded.
func (sel *selection) set(depth int) (string, map[string]int) {
	s := sel.d.s
	var parts []string
	counts := map[string]int{}
	add := func(c map[string]int) {
		for f, n := range c {
			counts[f] += n
			sel.counts[f] += n
			sel.d.size += n
		}
	}
	for range 1 + s.n(6) {
		if sel.d.size >= maxDocumentFields {
			break
		}
		switch k := s.n(10); {
		case k < 7 || depth >= 2 || sel.plain:
			if f, name, ok := sel.field(); ok {
				parts = append(parts, f)
				add(map[string]int{name: 1})
			}
		case k == 7:
			cond := ""
			if s.bool() {
				cond = " on " + sel.typ
			}
			inner, c := sel.set(depth + 1)
			parts = append(parts, "..."+cond+sel.d.directives()+" { "+inner+" }")
			for f, n := range c {
				counts[f] += n
			}
		default:
			name := sel.prefix + strconv.Itoa(len(sel.d.frags))
			sel.d.frags = append(sel.d.frags, "") // reserve the name before the nested ones
			i := len(sel.d.frags) - 1
			inner, c := sel.set(depth + 1)
			sel.d.frags[i] = "fragment " + name + " on " + sel.typ + " { " + inner + " }"
			parts = append(parts, "..."+name+sel.d.directives())
			for f, n := range c {
				counts[f] += n
			}
			if s.bool() && sel.fits(c) {
				parts = append(parts, "..."+name)
				add(c)
			}
		}
	}
	if len(parts) == 0 { // a set is never empty: the first field still free, unaliased
		name := "__typename"
		for _, f := range typeFields[sel.typ] {
			if k, taken := sel.keys[f]; (!taken || k == f) && sel.counts[f] < maxIdentical {
				name = f
				break
			}
		}
		sel.keys[name] = name
		parts = append(parts, name)
		add(map[string]int{name: 1})
	}
	return strings.Join(parts, " "), counts
}

// fits reports whether the fields of c can be selected once more.
func (sel *selection) fits(c map[string]int) bool {
	total := 0
	for f, n := range c {
		if sel.counts[f]+n > maxIdentical {
			return false
		}
		total += n
	}
	return sel.d.size+total <= maxDocumentFields
}

var aliases = []string{"a", "b", "x_1", "Z", "sequence", "summary", "text", "wake", "kind"}

// field returns a field, maybe aliased and with directives, and its name; false when
// its response key is taken by another field (gqlgen would refuse the document) or
// it is selected maxIdentical times already.
func (sel *selection) field() (string, string, bool) {
	s := sel.d.s
	fields := typeFields[sel.typ]
	name := fields[s.n(len(fields))]
	key, out := name, name
	if s.n(3) == 0 {
		key = aliases[s.n(len(aliases))]
		out = key + ": " + name
	}
	if f, taken := sel.keys[key]; taken && f != name || sel.counts[name] >= maxIdentical {
		return "", "", false
	}
	sel.keys[key] = name
	if !sel.plain && s.n(3) == 0 {
		out += sel.d.directives()
	}
	return out, name, true
}
