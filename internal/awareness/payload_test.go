package awareness

import (
	"encoding/json"
	"testing"
)

// SIG-2: a payload reads back as written, whichever decoder reads it.
func FuzzParsePayload(f *testing.F) {
	for _, p := range []Payload{
		{Outcome: OutcomeTimeout},
		{Channel: "telegram"},
		{Outcome: OutcomeError, Channel: "slack", Turns: 3},
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
		var want Payload
		wantErr := json.Unmarshal([]byte(s), &want)
		if got, ok := parsePlainPayload(s); ok {
			if wantErr != nil {
				t.Fatalf("fast path accepted %q, which encoding/json rejects: %v", s, wantErr)
			}
			if got != want {
				t.Fatalf("fast path read %q as %+v, encoding/json as %+v", s, got, want)
			}
		}
		got, err := ParsePayload(s)
		if (err == nil) != (wantErr == nil) || (err == nil && got != want) {
			t.Fatalf("ParsePayload(%q) = %+v, %v; encoding/json %+v, %v", s, got, err, want, wantErr)
		}
		// What a store writes always reads back.
		if err == nil && !want.IsZero() {
			b, _ := json.Marshal(want)
			if again, err := ParsePayload(string(b)); err != nil || again != want {
				t.Fatalf("round trip of %+v through %s: %+v, %v", want, b, again, err)
			}
		}
	})
}
