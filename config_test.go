package main

import (
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The loader every command uses: the command line first, then each flag's variable;
// positional arguments anywhere for the tools, "--" ends the flags.
func TestFlagSetParse(t *testing.T) {
	tests := []struct {
		name         string
		args         []string
		env          map[string]string
		interspersed bool
		wantName     string
		wantWait     time.Duration
		wantPos      []string
		wantErr      string
	}{
		{name: "defaults", wantName: "none", wantWait: time.Second},
		{name: "flags", args: []string{"--name", "a", "--wait", "2s"}, wantName: "a", wantWait: 2 * time.Second},
		{name: "environment", env: map[string]string{"T_NAME": "b", "T_WAIT": "3s"}, wantName: "b", wantWait: 3 * time.Second},
		{name: "flag beats environment", args: []string{"--name", "a"}, env: map[string]string{"T_NAME": "b"}, wantName: "a", wantWait: time.Second},
		{name: "empty variable is a value", env: map[string]string{"T_NAME": ""}, wantName: "", wantWait: time.Second},
		{name: "bad variable", env: map[string]string{"T_WAIT": "soon"}, wantErr: `T_WAIT="soon": `},
		{name: "positional stops the flags", args: []string{"x", "--name", "a"}, wantName: "none", wantWait: time.Second, wantPos: []string{"x", "--name", "a"}},
		{name: "interspersed", interspersed: true, args: []string{"x", "--name", "a", "y"}, wantName: "a", wantWait: time.Second, wantPos: []string{"x", "y"}},
		{name: "double dash ends the flags", interspersed: true, args: []string{"x", "--", "--name", "a"}, wantName: "none", wantWait: time.Second, wantPos: []string{"x", "--name", "a"}},
		{name: "unknown flag", args: []string{"--nope"}, wantErr: "flag provided but not defined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := newFlagSet("t")
			name := envFlag(fs, fs.String, "name", "none", "T_NAME", "a name")
			wait := envFlag(fs, fs.Duration, "wait", time.Second, "T_WAIT", "a wait")
			pos, err := fs.parse(tt.args, func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }, tt.interspersed)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if *name != tt.wantName || *wait != tt.wantWait {
				t.Errorf("name, wait = %q, %v; want %q, %v", *name, *wait, tt.wantName, tt.wantWait)
			}
			if diff := cmp.Diff(tt.wantPos, pos); diff != "" {
				t.Errorf("positional arguments (-want +got):\n%s", diff)
			}
			if got := fs.Lookup("name").Usage; got != "a name ($T_NAME)" {
				t.Errorf("usage = %q, want the variable named at its end", got)
			}
		})
	}
	if _, err := newFlagSet("t").parse([]string{"-h"}, func(string) (string, bool) { return "", false }, true); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: err = %v, want flag.ErrHelp", err)
	}
}

// mcp takes its flags from the environment through the same loader: a bad
// $AWARENESS_LOG_LEVEL is refused like a bad --log-level.
func TestMCPFlagsFromEnvironment(t *testing.T) {
	var stderr strings.Builder
	env := func(k string) (string, bool) { return "loud", k == "AWARENESS_LOG_LEVEL" }
	if code := mcpCmd(t.Context(), nil, strings.NewReader(""), &strings.Builder{}, &stderr, env); code != exitUsage {
		t.Errorf("exit %d, want %d", code, exitUsage)
	}
	if !strings.Contains(stderr.String(), `--log-level "loud"`) {
		t.Errorf("stderr %q does not name the bad level", stderr.String())
	}
}

// --db is a SQLite file path or a PostgreSQL URL; anything else is refused with what
// is wrong, and never with the password a URL may carry.
func TestValidateDB(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		db, want string // want "": valid
	}{
		{dir + "/a.db", ""},
		{"postgres://u:pw@db.example:5432/a?sslmode=require", ""},
		{"postgresql://u@db.example/a", ""},
		{"mysql://root:secret@db.example/a", `--db mysql://…: the scheme "mysql" is not supported: give a SQLite database file or a postgres:// URL`},
		{"sqlite:///var/lib/a.db", `the scheme "sqlite" is not supported`},
		{dir + "/missing/a.db", "does not exist"},
		{":memory:", "give a plain file path"},
		{"file:a.db", "give a plain file path"},
		{"", "--db is empty"},
	} {
		err := validateDB(tc.db)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("validateDB(%q) = %v, want valid", tc.db, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("validateDB(%q) = %v, want an error containing %q", tc.db, err, tc.want)
		case err != nil && strings.Contains(err.Error(), "secret"):
			t.Errorf("validateDB(%q) = %v: the error shows the password", tc.db, err)
		}
	}
}
