package awareness_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/awareness/vocabtest"
)

// TestPayloadCodecsKeepEveryField_SIG2: every field of Payload, found by reflection,
// survives the core's codecs: Map (the JSON object view), encoding/json (the stored
// form) read back by ParsePayload and its fast path, AppendJSON (what every response
// writes), and RecordInput through ValidateRecord (the API's input). graph/scalar,
// graph/resolvers, internal/models and graph run the same cases through theirs.
func TestPayloadCodecsKeepEveryField_SIG2(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range vocabtest.Cases(t) {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(c.JSON, viaJSON(t, c.Payload.Map())); diff != "" {
				t.Errorf("Map() (-want +got):\n%s", diff)
			}
			stored, err := json.Marshal(c.Payload)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c.JSON, viaJSON(t, c.Payload)); diff != "" {
				t.Errorf("json.Marshal (-want +got):\n%s", diff)
			}
			if fast, ok := awareness.ParsePlainPayload(string(stored)); !ok {
				t.Errorf("the fast decoder refused %s", stored)
			} else if diff := cmp.Diff(c.Payload, fast); diff != "" {
				t.Errorf("the fast decoder read %s as (-want +got):\n%s", stored, diff)
			}
			if got, err := awareness.ParsePayload(string(stored)); err != nil || got != c.Payload {
				t.Errorf("ParsePayload(%s) = %+v, %v", stored, got, err)
			}
			if b := c.Payload.AppendJSON(nil); !json.Valid(b) {
				t.Errorf("AppendJSON wrote %s", b)
			} else if diff := cmp.Diff(c.JSON, viaJSON(t, json.RawMessage(b))); diff != "" {
				t.Errorf("AppendJSON wrote %s (-want +got):\n%s", b, diff)
			}
			in := awareness.RecordInput{SessionKey: "agent:main:main", Kind: c.Kind, ActorType: awareness.ActorSystem}
			vocabtest.SetInput(t, &in, c.Payload)
			ne, err := awareness.ValidateRecord(in, now)
			if err != nil {
				t.Fatalf("ValidateRecord: %v", err)
			}
			if diff := cmp.Diff(c.Payload, ne.Event.Payload); diff != "" {
				t.Errorf("ValidateRecord's payload (-want +got):\n%s", diff)
			}
		})
	}
}

// viaJSON is v written by encoding/json and read back into a map.
func viaJSON(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}
