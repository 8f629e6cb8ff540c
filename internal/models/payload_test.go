package models

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/awareness/vocabtest"
)

// TestPayloadRowKeepsEveryField_SIG2: every field of awareness.Payload, found by
// reflection, survives the store's row (eventRowOf, then the row's event).
func TestPayloadRowKeepsEveryField_SIG2(t *testing.T) {
	for _, c := range vocabtest.Cases(t) {
		row, err := eventRowOf(awareness.Event{Kind: c.Kind, ActorType: awareness.ActorSystem, Payload: c.Payload})
		if err != nil {
			t.Fatalf("%s: eventRowOf: %v", c.Name, err)
		}
		if row.PayloadJSON == nil {
			t.Fatalf("%s: eventRowOf wrote no payload", c.Name)
		}
		ev, err := row.event()
		if err != nil {
			t.Fatalf("%s: event: %v", c.Name, err)
		}
		if diff := cmp.Diff(c.Payload, ev.Payload); diff != "" {
			t.Errorf("%s: the row's event payload (-want +got):\n%s", c.Name, diff)
		}
	}
}
