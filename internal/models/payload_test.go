package models

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/awareness/vocabtest"
)

// SIG-2: a payload reads back as written, whichever decoder reads it.
func FuzzDecodePayload(f *testing.F) {
	for _, p := range []awareness.Payload{
		{Outcome: awareness.OutcomeTimeout},
		{Channel: "telegram"},
		{Outcome: awareness.OutcomeError, Channel: "slack", Turns: 3},
		{Turns: -2},
		{Channel: `a"b\c<>&`},
		{Channel: "é漢字\u2028"},
	} {
		b, _ := json.Marshal(p)
		f.Add(string(b))
	}
	f.Add(`{"turns":01}`)
	f.Add(`{"turns":1,}`)
	f.Add(`{"prompt":"x"}`)
	f.Add(`{"outcome":"a","outcome":"b"}`)
	f.Fuzz(func(t *testing.T, s string) {
		var want awareness.Payload
		wantErr := json.Unmarshal([]byte(s), &want)
		var got awareness.Payload
		if decodePlainPayload(s, &got) {
			if wantErr != nil {
				t.Fatalf("fast path accepted %q, which encoding/json rejects: %v", s, wantErr)
			}
			if got != want {
				t.Fatalf("fast path read %q as %+v, encoding/json as %+v", s, got, want)
			}
		}
		got = awareness.Payload{}
		err := decodePayload(s, &got)
		if (err == nil) != (wantErr == nil) || (err == nil && got != want) {
			t.Fatalf("decodePayload(%q) = %+v, %v; encoding/json %+v, %v", s, got, err, want, wantErr)
		}
		// What the store writes always reads back through the fast path.
		if err == nil && !want.IsZero() {
			b, _ := json.Marshal(want)
			var again awareness.Payload
			if err := decodePayload(string(b), &again); err != nil || again != want {
				t.Fatalf("round trip of %+v through %s: %+v, %v", want, b, again, err)
			}
		}
	})
}

// TestPayloadRowKeepsEveryField_SIG2: every field of awareness.Payload, found by
// reflection, survives the store's codec (eventRowOf, then the fast decoder and the
// row's event), so a field the fast decoder does not know fails here instead of
// quietly taking the slow path.
func TestPayloadRowKeepsEveryField_SIG2(t *testing.T) {
	for _, c := range vocabtest.Cases(t) {
		row, err := eventRowOf(awareness.Event{Kind: c.Kind, ActorType: awareness.ActorSystem, Payload: c.Payload})
		if err != nil {
			t.Fatalf("%s: eventRowOf: %v", c.Name, err)
		}
		if row.PayloadJSON == nil {
			t.Fatalf("%s: eventRowOf wrote no payload", c.Name)
		}
		var fast awareness.Payload
		if !decodePlainPayload(*row.PayloadJSON, &fast) {
			t.Errorf("%s: the fast decoder refused %s", c.Name, *row.PayloadJSON)
		} else if diff := cmp.Diff(c.Payload, fast); diff != "" {
			t.Errorf("%s: the fast decoder read %s as (-want +got):\n%s", c.Name, *row.PayloadJSON, diff)
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
