package main

import (
	"os"
	"strings"
	"testing"
)

// The repository's gqlgen.yml binds every value of every bound enum.
func TestGqlgenYmlMatchesSchema(t *testing.T) {
	t.Chdir("../..")
	f, err := os.Open("gqlgen.yml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := check(f); err != nil {
		t.Fatalf("gqlgen.yml does not match the schema:\n%v", err)
	}
}

// A value the schema adds without its binding is named, and so is a binding the
// schema no longer has (the case gqlgen itself answers with a nil-pointer crash).
func TestNamesTheMissingBinding(t *testing.T) {
	t.Chdir("../..")
	b, err := os.ReadFile("gqlgen.yml")
	if err != nil {
		t.Fatal(err)
	}
	yml := string(b)
	const line = "      human: { value: github.com/awareness/awareness/internal/awareness.ActorHuman }\n"
	if !strings.Contains(yml, line) {
		t.Fatalf("gqlgen.yml no longer binds ActorType.human as %q; update the test", line)
	}
	missing := strings.Replace(yml, line, "", 1)
	err = check(strings.NewReader(missing))
	if err == nil || !strings.Contains(err.Error(), "models.ActorType.enum_values has no human") {
		t.Fatalf("a missing binding: got %v, want it named", err)
	}
	extra := strings.Replace(yml, line, line+"      vanished: { value: github.com/awareness/awareness/internal/awareness.ActorHuman }\n", 1)
	err = check(strings.NewReader(extra))
	if err == nil || !strings.Contains(err.Error(), "models.ActorType.enum_values binds vanished") {
		t.Fatalf("a binding the schema lacks: got %v, want it named", err)
	}
}
