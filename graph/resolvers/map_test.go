package resolvers

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/awareness/awareness/graph/gqlmodel"
	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/awareness/vocabtest"
)

// TestRecordInputKeepsEveryPayloadField_SIG2: every field of awareness.Payload, found
// by reflection, has its RecordEventInput field in the schema and reaches the event
// through recordInput and ValidateRecord.
func TestRecordInputKeepsEveryPayloadField_SIG2(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range vocabtest.Cases(t) {
		in := gqlmodel.RecordEventInput{SessionKey: "agent:main:main", Kind: c.Kind, ActorType: awareness.ActorSystem}
		vocabtest.SetInput(t, &in, c.Payload)
		ne, err := awareness.ValidateRecord(recordInput(in), now)
		if err != nil {
			t.Fatalf("%s: ValidateRecord: %v", c.Name, err)
		}
		if diff := cmp.Diff(c.Payload, ne.Event.Payload); diff != "" {
			t.Errorf("%s: the event's payload (-want +got):\n%s", c.Name, diff)
		}
	}
}
