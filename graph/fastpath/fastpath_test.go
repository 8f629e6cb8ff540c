package fastpath

import (
	"bytes"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"

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
