package upstream_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/upstream"
)

func TestHumanPrompt(t *testing.T) {
	at := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	tests := []struct {
		name, line string
		text       string
		ok         bool
	}{
		{"string content", userLine("hello"), "hello", true},
		{"text blocks", userBlocks("a", "b"), "a\nb", true},
		{"timestamp", userLineAt("hi", at), "hi", true},
		{"tool result", toolResultLine(), "", false},
		{"text and tool result", `{"type":"user","message":{"role":"user","content":[{"type":"text","text":"x"},{"type":"tool_result","content":"y"}]}}`, "", false},
		{"assistant", assistantLine("hello"), "", false},
		{"meta", metaLine("caveat"), "", false},
		{"sidechain", `{"type":"user","isSidechain":true,"message":{"role":"user","content":"task"}}`, "", false},
		{"compact summary", `{"type":"user","isCompactSummary":true,"message":{"role":"user","content":"summary"}}`, "", false},
		{"role not user", `{"type":"user","message":{"role":"system","content":"x"}}`, "", false},
		{"no message", `{"type":"user"}`, "", false},
		{"blank text", userLine(" \n\t"), "", false},
		{"image only", `{"type":"user","message":{"role":"user","content":[{"type":"image"}]}}`, "", false},
		{"content number", `{"type":"user","message":{"role":"user","content":5}}`, "", false},
		{"malformed", `{"type":"user","message":`, "", false},
		{"empty", ``, "", false},
		{"crlf tolerated", strings.TrimSuffix(userLine("win"), "\n") + "\r", "win", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text, got, ok := upstream.HumanPrompt([]byte(strings.TrimSuffix(tt.line, "\n")))
			if ok != tt.ok || text != tt.text {
				t.Errorf("HumanPrompt = %q, %v; want %q, %v", text, ok, tt.text, tt.ok)
			}
			if tt.name == "timestamp" && !got.Equal(at) {
				t.Errorf("at = %v, want %v", got, at)
			}
		})
	}
}

func FuzzHumanPrompt(f *testing.F) {
	for _, s := range []string{userLine("x"), userBlocks("a", "b"), toolResultLine(), assistantLine("y"), metaLine("z"), `{"type":"user"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		text, _, ok := upstream.HumanPrompt(line)
		if ok && strings.TrimSpace(text) == "" {
			t.Errorf("a human prompt with blank text: %q", line)
		}
	})
}

func TestValidateThreadID(t *testing.T) {
	for _, id := range []string{"0b9c2f4e-1d2a-4c1e-9f8a-3a2b1c0d9e8f", "abc", "a.b", "日本"} {
		if err := upstream.ValidateThreadID(id); err != nil {
			t.Errorf("ValidateThreadID(%q) = %v, want nil", id, err)
		}
	}
	for _, id := range []string{"", "a/b", `a\b`, "..", "a..b", "../x", ".hidden", "a\x00b", "a\nb", strings.Repeat("x", 256), "\xff"} {
		if err := upstream.ValidateThreadID(id); awareness.ErrorCode(err) != awareness.EINVALID {
			t.Errorf("ValidateThreadID(%q) = %v, want INVALID_ARGUMENT", id, err)
		}
	}
}

func TestNewDirCatalog(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	os.WriteFile(file, nil, 0o644)
	for _, tt := range []struct{ id, dir string }{
		{"Claude", dir}, {"", dir}, {"a b", dir}, {"claude", filepath.Join(dir, "nope")}, {"claude", file}, {"claude", ""},
	} {
		if _, err := upstream.NewDirCatalog(tt.id, tt.dir); err == nil {
			t.Errorf("NewDirCatalog(%q, %q) = nil error", tt.id, tt.dir)
		}
	}
	if c, err := upstream.NewDirCatalog("claude-code_2", dir); err != nil || c.ID() != "claude-code_2" || c.Dir() != dir {
		t.Errorf("NewDirCatalog = %v, %v", c, err)
	}
}

func TestDirCatalogScanEdges(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	dir := filepath.Join(root, "cat")
	os.Mkdir(dir, 0o755)
	cat, err := upstream.NewDirCatalog("claude", dir)
	if err != nil {
		t.Fatal(err)
	}
	scan := func(thread string, marker int64) (awareness.ScanResult, error) {
		return cat.Scan(ctx, awareness.ScanRequest{ThreadID: thread, Marker: marker, MaxBytes: upstream.MaxScanBytes})
	}
	content := userLine("a") + userLine("b")
	os.WriteFile(filepath.Join(dir, "t.jsonl"), []byte(content), 0o644)

	if r, err := scan("t", 0); err != nil || r.Turns != 2 || r.Next != int64(len(content)) {
		t.Errorf("scan from 0 = %+v, %v", r, err)
	}
	if r, err := scan("t", int64(len(content))+10); err != nil || r.Blocked == "" || r.Next != int64(len(content))+10 {
		t.Errorf("scan past the end (truncated file) = %+v, %v; want blocked at the marker", r, err)
	}
	if r, err := scan("gone", 0); err != nil || !r.Missing {
		t.Errorf("scan of a missing file = %+v, %v; want Missing", r, err)
	}
	os.Mkdir(filepath.Join(dir, "d.jsonl"), 0o755)
	if r, err := scan("d", 0); err != nil || !r.Missing {
		t.Errorf("scan of a directory = %+v, %v; want Missing", r, err)
	}
	if _, err := scan("../t", 0); awareness.ErrorCode(err) != awareness.EINVALID {
		t.Errorf("scan of a bad thread id = %v", err)
	}
	// A vanished catalog directory is inconclusive, not a miss, and the message
	// carries no path.
	os.RemoveAll(dir)
	r, err := scan("t", 0)
	if err == nil || r.Missing {
		t.Errorf("scan with the catalog directory gone = %+v, %v; want an inconclusive error", r, err)
	}
	if msg := awareness.ErrorMessage(err); strings.Contains(msg, root) {
		t.Errorf("message %q contains the path", msg)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := cat.Scan(cancelled, awareness.ScanRequest{ThreadID: "t", MaxBytes: 1}); err == nil {
		t.Errorf("scan with a cancelled context succeeded")
	}
}

func TestDirCatalogResolveEndsAtLastCompleteLine(t *testing.T) {
	dir := t.TempDir()
	cat, _ := upstream.NewDirCatalog("claude", dir)
	// The last newline lies more than one read chunk (64 KiB) before the end.
	head := userLine("h")
	tail := strings.Repeat("p", 200<<10)
	os.WriteFile(filepath.Join(dir, "t.jsonl"), []byte(head+tail), 0o644)
	th, err := cat.Resolve(context.Background(), "t")
	if err != nil || th.End != int64(len(head)) || th.ThreadID != "t" || th.Source != filepath.Join(dir, "t.jsonl") {
		t.Errorf("Resolve = %+v, %v; want End %d", th, err, len(head))
	}
	os.WriteFile(filepath.Join(dir, "e.jsonl"), nil, 0o644)
	if th, err := cat.Resolve(context.Background(), "e"); err != nil || th.End != 0 {
		t.Errorf("Resolve(empty) = %+v, %v", th, err)
	}
}
