package scalar

import (
	"bytes"
	"testing"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/awareness/vocabtest"
)

// MarshalPayload writes, byte for byte, what MarshalJSONObject writes for the
// payload's map (SIG-2: a payload reads back the same whichever path wrote it).
func FuzzMarshalPayloadMatchesMap(f *testing.F) {
	f.Add("", "", 0)
	f.Add("timeout", "", 0)
	f.Add("", "telegram", 0)
	f.Add("error", "slack", 3)
	f.Add("", "", -7)
	f.Add("a\"b\\c", "<script>&amp;", 1)
	f.Add("\u2028\u2029", "\x00\x1f\x7f", 2)
	f.Add("\xff\xfe", "é漢字🙂", 1<<30)
	f.Fuzz(func(t *testing.T, outcome, channel string, turns int) {
		p := awareness.Payload{Outcome: awareness.RunOutcome(outcome), Channel: channel, Turns: turns}
		var got, want bytes.Buffer
		MarshalPayload(p).MarshalGQL(&got)
		MarshalJSONObject(p.Map()).MarshalGQL(&want)
		if got.String() != want.String() {
			t.Fatalf("MarshalPayload(%+v) = %s, want %s", p, got.String(), want.String())
		}
	})
}

func TestUnmarshalPayload(t *testing.T) {
	p, err := UnmarshalPayload(map[string]any{"outcome": "timeout", "channel": "telegram", "turns": 2})
	if err != nil || p != (awareness.Payload{Outcome: awareness.OutcomeTimeout, Channel: "telegram", Turns: 2}) {
		t.Fatalf("UnmarshalPayload = %+v, %v", p, err)
	}
	if p, err := UnmarshalPayload(nil); err != nil || !p.IsZero() {
		t.Fatalf("UnmarshalPayload(nil) = %+v, %v", p, err)
	}
	for _, bad := range []any{map[string]any{"prompt": "secret"}, "text", []any{1}} {
		if _, err := UnmarshalPayload(bad); awareness.ErrorCode(err) != awareness.EINVALID {
			t.Errorf("UnmarshalPayload(%#v) error %v, want INVALID_ARGUMENT", bad, err)
		}
	}
}

// TestPayloadScalarKeepsEveryField_SIG2: every field of awareness.Payload, found by
// reflection, is written by MarshalPayload (the writer of every response, the fast
// paths' too) exactly as the JSON scalar writes the payload's object, and read back by
// UnmarshalPayload.
func TestPayloadScalarKeepsEveryField_SIG2(t *testing.T) {
	for _, c := range vocabtest.Cases(t) {
		var got, want bytes.Buffer
		MarshalPayload(c.Payload).MarshalGQL(&got)
		MarshalJSONObject(c.JSON).MarshalGQL(&want)
		if got.String() != want.String() {
			t.Errorf("%s: MarshalPayload(%+v) = %s, want %s", c.Name, c.Payload, got.String(), want.String())
		}
		p, err := UnmarshalPayload(c.JSON)
		if err != nil || p != c.Payload {
			t.Errorf("%s: UnmarshalPayload(%v) = %+v, %v; want %+v", c.Name, c.JSON, p, err, c.Payload)
		}
	}
}
