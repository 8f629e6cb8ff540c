package main

import (
	"bytes"
	"os"
	"testing"
)

// The committed clients/ts/src/vocab_tables.ts is what vocabgen writes from the core's
// tables today (go generate ran after the last change to them).
func TestVocabTablesAreFresh(t *testing.T) {
	got, err := os.ReadFile("../../clients/ts/src/vocab_tables.ts")
	if err != nil {
		t.Fatal(err)
	}
	if want := render(); !bytes.Equal(got, want) {
		t.Errorf("clients/ts/src/vocab_tables.ts is stale: run go generate . and commit it\nwant:\n%s", want)
	}
}
