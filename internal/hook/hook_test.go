package hook

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/awareness/awareness/client"
)

func notices(n int) []client.Notice {
	out := make([]client.Notice, n)
	for i := range out {
		key := fmt.Sprintf("agent:main:subagent:child-%03d", i)
		out[i] = client.Notice{Target: key, TargetAgentID: "main", NotifiedVersion: 2,
			Text: `Session "` + key + `" changed (other actor). Reconcile before acting: session_status sessionKey "` + key + `" changesSince 1.`}
	}
	return out
}

// The printed text stays under MaxContext with a digest line when more are pending
// than fit, and holds each fitted notice's exact text on a line of its own (NTC-1).
func TestFitRender_UnderLimitWithDigest_CLT4(t *testing.T) {
	for _, n := range []int{1, 5, 60, 61, 200} {
		ns := notices(n)
		fit := Fit(ns, MaxContext)
		text := Render(ns[:fit], n-fit)
		if len(text) > MaxContext {
			t.Errorf("%d notices: %d characters, over %d", n, len(text), MaxContext)
		}
		lines := strings.Split(text, "\n")
		if lines[0] != header {
			t.Errorf("%d notices: first line %q", n, lines[0])
		}
		for i, nt := range ns[:fit] {
			if lines[1+i] != nt.Text {
				t.Errorf("%d notices: line %d = %q, want the notice's text", n, 1+i, lines[1+i])
			}
		}
		hasDigest := strings.Contains(text, "more stale-session")
		if (fit < n) != hasDigest || fit < n && !strings.Contains(text, fmt.Sprintf(" %d more", n-fit)) {
			t.Errorf("%d notices, %d fit: digest %v in %q", n, fit, hasDigest, lines[len(lines)-1])
		}
		if fit < 1 || (n > 50 && fit == n) {
			t.Errorf("%d notices: %d fit", n, fit)
		}
	}
}

func TestOutput_Forms_CLT4(t *testing.T) {
	tests := []struct {
		f     Format
		event string
		want  string
	}{
		{Claude, "UserPromptSubmit", `{"hookSpecificOutput":{"additionalContext":"x","hookEventName":"UserPromptSubmit"}}`},
		{Claude, "Stop", `{"hookSpecificOutput":{"additionalContext":"x","hookEventName":"Stop"}}`},
		{Codex, "PostToolUse", `{"hookSpecificOutput":{"additionalContext":"x","hookEventName":"PostToolUse"}}`},
		{Codex, "Stop", `{"decision":"block","reason":"x"}`},
	}
	for _, tt := range tests {
		got, err := Output(tt.f, tt.event, events[tt.f][tt.event], "x")
		if err != nil || strings.TrimSpace(string(got)) != tt.want {
			t.Errorf("Output(%s, %s) = %s, %v; want %s", tt.f, tt.event, got, err, tt.want)
		}
	}
	if how := events[Claude]["Notification"]; how != "" {
		t.Errorf("Notification hooks get %q, want nothing", how)
	}
}

// Install merges into what is there, keeps every other key and hook, and a second
// run changes nothing.
func TestInstall_MergesAndIsIdempotent(t *testing.T) {
	for _, h := range []Format{Claude, Codex} {
		t.Run(string(h), func(t *testing.T) {
			home, proj := t.TempDir(), t.TempDir()
			mine := `{"model":"opus","hooks":{"Stop":[{"hooks":[{"type":"command","command":"notify-send done"}]}]},"permissions":{"allow":["Bash(ls)"]}}`
			toml := "# mine\nmodel = \"gpt\"\n\n[mcp_servers.other]\ncommand = \"x\"\n"
			settings := filepath.Join(proj, ".claude", "settings.json")
			userSettings := filepath.Join(home, ".claude", "settings.json")
			codexHooks, codexConfig := filepath.Join(proj, ".codex", "hooks.json"), filepath.Join(proj, ".codex", "config.toml")
			write := func(p, s string) {
				os.MkdirAll(filepath.Dir(p), 0o755)
				if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if h == Claude {
				write(settings, mine)
				write(userSettings, `{"theme":"dark"}`)
			} else {
				write(codexHooks, `{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"notify-send done"}]}]}}`)
				write(codexConfig, toml)
			}
			cfg := InstallConfig{Harness: h, Project: proj, Home: home, Binary: "/opt/bin/awareness", URL: "http://127.0.0.1:8080/query", Watcher: "agent:main:main"}
			files, err := Install(cfg)
			if err != nil {
				t.Fatal(err)
			}
			snapshot := map[string]string{}
			for _, f := range files {
				b, _ := os.ReadFile(f)
				snapshot[f] = string(b)
			}
			cfg.URL = "http://127.0.0.1:8080/query" // the same again
			if _, err := Install(cfg); err != nil {
				t.Fatal(err)
			}
			for _, f := range files {
				if b, _ := os.ReadFile(f); string(b) != snapshot[f] {
					t.Errorf("%s changed on the second run:\n%s\n---\n%s", f, snapshot[f], b)
				}
			}
			hooksFile := settings
			if h == Codex {
				hooksFile = codexHooks
			}
			var got struct {
				Model string                      `json:"model"`
				Hooks map[string][]map[string]any `json:"hooks"`
			}
			b, _ := os.ReadFile(hooksFile)
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), "notify-send done") {
				t.Errorf("the existing Stop hook was lost:\n%s", b)
			}
			for _, ev := range []string{"SessionStart", "UserPromptSubmit", "PostToolUse", "Stop"} {
				if n := strings.Count(string(b), `hook inject`); n != 4 {
					t.Errorf("%d inject hooks, want 4 (one per event):\n%s", n, b)
					break
				}
				if len(got.Hooks[ev]) == 0 {
					t.Errorf("no %s hook", ev)
				}
			}
			if h == Claude {
				if got.Model != "opus" {
					t.Errorf("model = %q, want the existing key kept", got.Model)
				}
				u, _ := os.ReadFile(userSettings)
				if !strings.Contains(string(u), `"theme": "dark"`) || !strings.Contains(string(u), "mcp__awareness__session_status") {
					t.Errorf("user settings: %s", u)
				}
				p, _ := os.ReadFile(settings)
				if !strings.Contains(string(p), `"Bash(ls)"`) || !strings.Contains(string(p), "asyncRewake") {
					t.Errorf("project settings lost the permission or lack the wake hook: %s", p)
				}
				m, _ := os.ReadFile(filepath.Join(proj, ".mcp.json"))
				if !strings.Contains(string(m), `"alwaysLoad": true`) {
					t.Errorf(".mcp.json: %s", m)
				}
			} else {
				c, _ := os.ReadFile(codexConfig)
				if !strings.HasPrefix(string(c), toml) || strings.Count(string(c), "[mcp_servers.awareness]") != 1 {
					t.Errorf("config.toml:\n%s", c)
				}
			}
		})
	}
}

func TestReplaceTOMLTable(t *testing.T) {
	block := "[mcp_servers.awareness]\ncommand = \"new\"\n"
	tests := []struct{ in, want string }{
		{"", block},
		{"a = 1", "a = 1\n\n" + block},
		{"[mcp_servers.awareness]\ncommand = \"old\"\n[mcp_servers.awareness.env]\nX = \"1\"\n\n[other]\nb = 2\n", block + "\n[other]\nb = 2\n"},
		{"# c\n[x]\n[mcp_servers.awareness] # mine\ncommand = \"old\"\n", "# c\n[x]\n" + block},
	}
	for _, tt := range tests {
		got, err := replaceTOMLTable([]byte(tt.in), "mcp_servers.awareness", block)
		if err != nil || string(got) != tt.want {
			t.Errorf("replaceTOMLTable(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	if _, err := replaceTOMLTable([]byte("mcp_servers.awareness = { command = \"x\" }\n"), "mcp_servers.awareness", block); err == nil {
		t.Error("a dotted key: no error")
	}
}
