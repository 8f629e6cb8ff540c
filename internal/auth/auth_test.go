package auth_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/awareness/awareness/internal/auth"
	"github.com/awareness/awareness/internal/awareness"
)

const (
	adminToken = "admin-0123456789abcdef0123456789abcdef"
	opsToken   = "ops-0123456789abcdef0123456789abcdef00"
)

const goodFile = `{"tokens":[
  {"name":"dash","role":"admin","token":"` + adminToken + `"},
  {"role":"agent:ops","token":"` + opsToken + `"}
]}`

func writeFile(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "auth.json")
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // umask
		t.Fatal(err)
	}
	return p
}

func TestLoadAndAuthenticate(t *testing.T) {
	k, warnings, err := auth.Load(writeFile(t, goodFile, 0o600))
	if err != nil || len(warnings) != 0 {
		t.Fatalf("Load: %v %v", err, warnings)
	}
	if k.Len() != 2 {
		t.Fatalf("Len = %d, want 2", k.Len())
	}
	tests := []struct {
		header string
		want   awareness.Principal
		err    error
	}{
		{"Bearer " + adminToken, awareness.Principal{Admin: true, Name: "dash"}, nil},
		{"bearer  " + opsToken + " ", awareness.Principal{AgentID: "ops", Name: "tokens[1]"}, nil},
		{"", awareness.Principal{}, auth.ErrNoCredentials},
		{"   ", awareness.Principal{}, auth.ErrNoCredentials},
		{adminToken, awareness.Principal{}, auth.ErrBadCredentials},
		{"Basic " + adminToken, awareness.Principal{}, auth.ErrBadCredentials},
		{"Bearer " + adminToken + "x", awareness.Principal{}, auth.ErrBadCredentials},
		{"Bearer " + strings.ToUpper(adminToken), awareness.Principal{}, auth.ErrBadCredentials},
		{"Bearer", awareness.Principal{}, auth.ErrBadCredentials},
	}
	for _, tc := range tests {
		got, err := k.Authenticate(tc.header)
		if !errors.Is(err, tc.err) || got != tc.want {
			t.Errorf("Authenticate(%q) = %+v, %v; want %+v, %v", tc.header, got, err, tc.want, tc.err)
		}
	}
}

func TestLoadRefusesOpenPermissions(t *testing.T) {
	if _, _, err := auth.Load(writeFile(t, goodFile, 0o644)); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("world-readable file: err = %v, want a refusal naming chmod 600", err)
	}
	if _, _, err := auth.Load(writeFile(t, goodFile, 0o602)); err == nil {
		t.Error("world-writable file accepted")
	}
	_, warnings, err := auth.Load(writeFile(t, goodFile, 0o640))
	if err != nil || len(warnings) != 1 {
		t.Errorf("group-readable file: err = %v, warnings = %v; want one warning", err, warnings)
	}
}

func TestParseRejectsBadFiles(t *testing.T) {
	long := strings.Repeat("k", auth.MinTokenLength)
	tests := map[string]string{
		"not JSON":        `tokens: x`,
		"no tokens":       `{"tokens":[]}`,
		"unknown field":   `{"tokens":[{"role":"admin","token":"` + long + `","scope":"x"}]}`,
		"bad role":        `{"tokens":[{"role":"root","token":"` + long + `"}]}`,
		"bad agent id":    `{"tokens":[{"role":"agent:Ops!","token":"` + long + `"}]}`,
		"short token":     `{"tokens":[{"role":"admin","token":"short"}]}`,
		"token w/ space":  `{"tokens":[{"role":"admin","token":"` + long + ` x"}]}`,
		"duplicate token": `{"tokens":[{"role":"admin","token":"` + long + `"},{"role":"agent:a","token":"` + long + `"}]}`,
		"trailing data":   `{"tokens":[{"role":"admin","token":"` + long + `"}]} {}`,
		"bad watch grant": `{"tokens":[{"role":"admin","token":"` + long + `"}],"grants":{"watch":{"dev":["Ops!"]}}}`,
		"bad catalog":     `{"tokens":[{"role":"admin","token":"` + long + `"}],"grants":{"catalogs":{"a b":["dev"]}}}`,
		"unknown grant":   `{"tokens":[{"role":"admin","token":"` + long + `"}],"grants":{"read":{"dev":["ops"]}}}`,
	}
	for name, doc := range tests {
		_, err := auth.Parse([]byte(doc))
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if strings.Contains(err.Error(), long) {
			t.Errorf("%s: the error %q shows the token", name, err)
		}
	}
}

func TestParseGrants(t *testing.T) {
	k, err := auth.Parse([]byte(`{"tokens":[{"role":"agent:dev","token":"` + opsToken + `"}],
	  "grants":{"watch":{"dev":["ops"]},"catalogs":{"claude":["dev"]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	g := k.Grants()
	if !g.MayWatch("dev", "ops") || g.MayWatch("ops", "dev") || !g.MayWatch("ops", "ops") {
		t.Errorf("watch grants %+v: want dev→ops only", g.Watch)
	}
	if !g.MayAdopt("claude", "dev") || g.MayAdopt("claude", "ops") || !g.MayAdopt("other", "ops") {
		t.Errorf("catalog grants %+v: want claude restricted to dev, others open", g.Catalogs)
	}
	k, err = auth.Parse([]byte(goodFile))
	if err != nil {
		t.Fatal(err)
	}
	if g := k.Grants(); g.MayWatch("ops", "main") {
		t.Error("a file without grants grants a watch")
	}
}

func TestBearerToken(t *testing.T) {
	for in, want := range map[string]string{"Bearer abc": "abc", "BEARER abc": "abc", " Bearer  abc ": "abc", "Bearer ": "", "Token abc": ""} {
		got, ok := auth.BearerToken(in)
		if got != want || ok != (want != "") {
			t.Errorf("BearerToken(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}
