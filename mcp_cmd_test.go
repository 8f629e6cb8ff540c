package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// The help of serve names /mcp and its flags with their defaults; the help of
// `awareness mcp` says what it is in front of and names its flags.
func TestMCPHelp(t *testing.T) {
	var stdout bytes.Buffer
	run(context.Background(), []string{"serve", "--help"}, &stdout, &bytes.Buffer{})
	for _, want := range []string{"/mcp", "-mcp-toolsets string", "(default \"all\")", "-mcp-read-only", "-mcp-session-idle duration", "(default 30m0s)",
		"-mcp-max-sessions int", "(default 64)", "-mcp-max-subscriptions int", "(default 128)"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("serve --help does not say %q", want)
		}
	}
	var stderr bytes.Buffer
	if code := mcpCmd(context.Background(), []string{"--help"}, strings.NewReader(""), &bytes.Buffer{}, &stderr, func(string) (string, bool) { return "", false }); code != exitOK {
		t.Errorf("mcp --help: exit %d", code)
	}
	for _, want := range []string{"Usage: awareness mcp", "/mcp", "-url string", "-token-file string", "-toolsets string", "-read-only", "-keep-alive duration"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("mcp --help does not say %q:\n%s", want, stderr.String())
		}
	}
}

func TestMCPEndpoint(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:8080":        "http://127.0.0.1:8080/mcp",
		"http://127.0.0.1:8080/":       "http://127.0.0.1:8080/mcp",
		"http://127.0.0.1:8080/query":  "http://127.0.0.1:8080/mcp",
		"https://aw.example/mcp":       "https://aw.example/mcp",
		"https://aw.example/proxy/mcp": "https://aw.example/proxy/mcp",
	} {
		if got, err := mcpEndpoint(in); err != nil || got != want {
			t.Errorf("mcpEndpoint(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"127.0.0.1:8080", "ftp://x", ""} {
		if _, err := mcpEndpoint(bad); err == nil {
			t.Errorf("mcpEndpoint(%q) accepted", bad)
		}
	}
}
