package client

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/awareness/awareness/internal/awareness/vocabtest"
)

// TestEventCarriesEveryPayloadField: every field of the service's event payload,
// found by reflection, has its field in Event, sent under the payload's JSON key (the
// RecordEventInput field of the same name).
func TestEventCarriesEveryPayloadField(t *testing.T) {
	for _, c := range vocabtest.Cases(t) {
		var ev Event
		vocabtest.SetInput(t, &ev, c.Payload)
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		var sent map[string]any
		if err := json.Unmarshal(b, &sent); err != nil {
			t.Fatal(err)
		}
		got := map[string]any{}
		for k := range c.JSON {
			if v, ok := sent[k]; ok {
				got[k] = v
			}
		}
		if diff := cmp.Diff(c.JSON, got); diff != "" {
			t.Errorf("%s: the payload fields of %s (-want +got):\n%s", c.Name, b, diff)
		}
	}
}

// TestTypeScriptEventCarriesEveryPayloadField: the TypeScript client's Event declares
// every payload field too, under its JSON key.
func TestTypeScriptEventCarriesEveryPayloadField(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "clients", "ts", "src", "recorder.ts"))
	if err != nil {
		t.Fatal(err)
	}
	decl := regexp.MustCompile(`(?s)export interface Event \{(.*?)\n\}`).FindSubmatch(src)
	if decl == nil {
		t.Fatal("clients/ts/src/recorder.ts declares no Event")
	}
	for _, f := range vocabtest.Fields(t) {
		if !regexp.MustCompile(`(?m)^\s*` + f.JSON + `\?: (string|number);`).Match(decl[1]) {
			t.Errorf("the TypeScript Event has no optional field %s", f.JSON)
		}
	}
}
