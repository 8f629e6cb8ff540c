package fastpath

import (
	"bytes"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/awareness/awareness/internal/awareness"
)

// A selection the fast path does not know is left to gqlgen (which then reports the
// error it would anyway).
func TestLeavesUnknownSelectionsToGqlgen(t *testing.T) {
	cols, ok := eventColumns(nil)
	if !ok || len(cols) != 0 {
		t.Fatalf("empty selection: %v %v", cols, ok)
	}
	if writable(&awareness.Event{Kind: "bogus", ActorType: awareness.ActorHuman, OccurredAt: time.Now()}) {
		t.Error("an event of an unknown kind counts as writable")
	}
	if writable(&awareness.Event{Kind: awareness.GoalChanged, ActorType: awareness.ActorHuman}) {
		t.Error("an event without a time counts as writable")
	}
}

// writeQuoted writes every string as gqlgen's MarshalString does, byte for byte:
// every single byte (control characters, quotes, invalid UTF-8) and mixed text.
func TestWriteQuotedMatchesMarshalString(t *testing.T) {
	ins := []string{"", "plain", `quote " backslash \ slash /`, "é漢字🙂", "\u2028\u2029", "bad\xffutf8\xc3", "<b>&amp;</b>"}
	for c := range 256 {
		ins = append(ins, string([]byte{byte(c)}), "a"+string([]byte{byte(c)})+"é")
	}
	for _, s := range ins {
		var got, want bytes.Buffer
		writeQuoted(&got, s)
		graphql.MarshalString(s).MarshalGQL(&want)
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Errorf("%q: got %q, want %q", s, got.Bytes(), want.Bytes())
		}
	}
}

// A page grows the response's buffer once, to about its size (REC-1): its events
// differ in their texts, payloads and times, the first being the smallest, and the
// buffer ends with less than an eighth of it unused (a second growth would leave about
// half).
func TestPageGrowsBufferOnce(t *testing.T) {
	var fields []graphql.CollectedField
	for _, f := range []string{"sequence", "kind", "actorType", "actorId", "summary", "occurredAt", "runId", "payload", "sessionKey", "agentId"} {
		fields = append(fields, graphql.CollectedField{Field: &ast.Field{Name: f, Alias: f}})
	}
	cols, ok := eventColumns(fields)
	if !ok {
		t.Fatal("full selection not writable")
	}
	ref := awareness.SessionRef{AgentID: "main", Key: "agent:main:direct:alice"}
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	events := []awareness.Event{{Session: ref, Sequence: 1, Kind: awareness.Compacted, ActorType: awareness.ActorSystem, OccurredAt: t0}}
	for i := 2; i <= 200; i++ {
		e := awareness.Event{Session: ref, Sequence: int64(i) * 997, Kind: awareness.HumanDirectMessage,
			ActorType: awareness.ActorHuman, ActorID: "+15550100", Summary: strings.Repeat("status update ", i%23),
			OccurredAt: t0.Add(time.Duration(i) * 1234567 * time.Nanosecond), RunID: "run-" + strconv.Itoa(i)}
		if i%3 == 0 {
			e.Payload = awareness.Payload{Outcome: awareness.OutcomeTimeout, Channel: "telegram", Turns: i}
		}
		events = append(events, e)
	}
	var pages atomic.Int64
	var buf bytes.Buffer
	buf.WriteString(`{"events":`)
	eventPage{events: events, cols: cols, written: &pages}.MarshalGQL(&buf)
	if unused := buf.Cap() - buf.Len(); unused > buf.Len()/8 {
		t.Errorf("page of %d bytes left %d bytes of its buffer unused (grown more than once, or too far)", buf.Len(), unused)
	}
}
