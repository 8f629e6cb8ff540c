package fastpath

import (
	"testing"
	"time"

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
