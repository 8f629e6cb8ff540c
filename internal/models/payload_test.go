package models

import (
	"encoding/json"
	"testing"

	"github.com/awareness/awareness/internal/awareness"
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
