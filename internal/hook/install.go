package hook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// InstallConfig says what `awareness hook install` writes.
type InstallConfig struct {
	Harness Format
	// Project is the project directory whose settings to write; "" writes the user's,
	// under Home.
	Project string
	// Home is the user's home directory; CodexHome is $CODEX_HOME, "" for Home/.codex.
	Home, CodexHome string
	// Binary is the awareness executable the hooks and the MCP server run.
	Binary string
	// URL, Watcher and TokenFile are passed to every hook command; URL also to the
	// MCP server.
	URL, Watcher, TokenFile string
	// WaitTimeout is hook wait's --timeout; DefaultWaitTimeout when 0.
	WaitTimeout int // seconds
	// NoWake leaves out Claude Code's asyncRewake hook, hook wait.
	NoWake bool
}

// MCPServerName is the name the installer gives the MCP server: Claude Code then
// calls its tools mcp__awareness__<tool>.
const MCPServerName = "awareness"

// mcpTools are the MCP tools the Claude Code settings allow without asking: in -p
// mode an unallowed tool is refused.
var mcpTools = []string{"session_status", "sessions_list", "pending_notices", "ack_notices", "session_watch", "session_unwatch", "wait_for_notices"}

// rewakeMessage is what Claude Code puts before hook wait's output when it wakes the
// model; its default calls the output a "Stop hook blocking error".
const rewakeMessage = "While this session was idle, another actor changed a session it depends on:"

// injectTimeout is the harness's timeout for an inject hook, in seconds: far above
// the hook's own bound, which is what limits it.
const injectTimeout = 10

// Install writes the harness's settings, merged into the files already there: the
// hooks, the MCP server and, for Claude Code, the tool permissions. Every other key
// and hook is kept; the hooks and server it wrote before are replaced, so running it
// again changes nothing. It returns the files it wrote.
func Install(cfg InstallConfig) ([]string, error) {
	if cfg.Binary == "" || cfg.URL == "" || cfg.Watcher == "" {
		return nil, errors.New("install needs the binary, --url and --watcher")
	}
	switch cfg.Harness {
	case Claude:
		return installClaude(cfg)
	case Codex:
		return installCodex(cfg)
	}
	return nil, fmt.Errorf("unknown harness %q: want claude or codex", cfg.Harness)
}

// commands returns the inject and wait command lines.
func (cfg InstallConfig) commands() (inject, wait string) {
	common := []string{"--url", cfg.URL, "--watcher", cfg.Watcher}
	if cfg.TokenFile != "" {
		common = append(common, "--token-file", cfg.TokenFile)
	}
	inject = shellJoin(append(append([]string{cfg.Binary, "hook", "inject"}, common...), "--format", string(cfg.Harness)))
	t := cfg.WaitTimeout
	if t <= 0 {
		t = int(DefaultWaitTimeout.Seconds())
	}
	wait = shellJoin(append(append([]string{cfg.Binary, "hook", "wait"}, common...), "--timeout", fmt.Sprintf("%ds", t)))
	return inject, wait
}

func (cfg InstallConfig) waitTimeout() int {
	if cfg.WaitTimeout <= 0 {
		return int(DefaultWaitTimeout.Seconds())
	}
	return cfg.WaitTimeout
}

// hookEntries are the hooks of one harness, by event: a list of matcher groups as
// both harnesses' settings spell them.
func (cfg InstallConfig) hookEntries() map[string][]any {
	inject, wait := cfg.commands()
	cmd := func(c string) map[string]any {
		return map[string]any{"type": "command", "command": c, "timeout": injectTimeout}
	}
	group := func(hooks ...any) []any { return []any{map[string]any{"hooks": hooks}} }
	out := map[string][]any{
		"SessionStart":     group(cmd(inject)),
		"UserPromptSubmit": group(cmd(inject)),
		"PostToolUse":      {map[string]any{"matcher": "*", "hooks": []any{cmd(inject)}}},
	}
	if cfg.Harness == Claude && !cfg.NoWake {
		// The asyncRewake hook runs in the background when a turn ends and wakes the
		// idle session when a notice opens. Codex has no such hook.
		out["Stop"] = group(cmd(inject), map[string]any{"type": "command", "command": wait, "asyncRewake": true,
			"timeout": cfg.waitTimeout() + 60, "rewakeMessage": rewakeMessage, "rewakeSummary": "awareness: a watched session changed"})
	} else {
		out["Stop"] = group(cmd(inject))
	}
	return out
}

// ourCommand matches a hook command this installer wrote: the binary, then hook
// inject or hook wait.
var ourCommand = regexp.MustCompile(`(^|[/'"\s])awareness(\.exe)?['"]?\s+hook\s+(inject|wait)(\s|$)`)

// mergeHooks merges entries into a settings object's "hooks": every matcher group's
// hooks that ourCommand matches are removed, and groups left empty go; then the
// entries are appended.
func mergeHooks(settings map[string]any, entries map[string][]any) error {
	hooks, ok := settings["hooks"].(map[string]any)
	if settings["hooks"] != nil && !ok {
		return errors.New(`"hooks" is not an object`)
	}
	if hooks == nil {
		hooks = map[string]any{}
	}
	for event, groups := range hooks {
		list, ok := groups.([]any)
		if !ok {
			continue
		}
		var kept []any
		for _, g := range list {
			gm, ok := g.(map[string]any)
			if !ok {
				kept = append(kept, g)
				continue
			}
			hs, _ := gm["hooks"].([]any)
			var mine []any
			for _, h := range hs {
				if hm, ok := h.(map[string]any); ok {
					if c, _ := hm["command"].(string); ourCommand.MatchString(c) {
						continue
					}
				}
				mine = append(mine, h)
			}
			if len(hs) > 0 && len(mine) == 0 {
				continue
			}
			if len(mine) != len(hs) {
				gm["hooks"] = mine
			}
			kept = append(kept, gm)
		}
		if kept == nil {
			delete(hooks, event)
		} else {
			hooks[event] = kept
		}
	}
	for event, groups := range entries {
		list, _ := hooks[event].([]any)
		hooks[event] = append(list, groups...)
	}
	settings["hooks"] = hooks
	return nil
}

func installClaude(cfg InstallConfig) ([]string, error) {
	var settingsPath, mcpPath string
	if cfg.Project != "" {
		// Project scope: .claude/settings.json holds the hooks and permissions, and
		// Claude Code reads it in -p mode too; .mcp.json holds the server, which the
		// settings approve by name.
		settingsPath = filepath.Join(cfg.Project, ".claude", "settings.json")
		mcpPath = filepath.Join(cfg.Project, ".mcp.json")
	} else {
		settingsPath = filepath.Join(cfg.Home, ".claude", "settings.json")
		mcpPath = filepath.Join(cfg.Home, ".claude.json")
	}
	settings, err := readJSON(settingsPath)
	if err != nil {
		return nil, err
	}
	if err := mergeHooks(settings, cfg.hookEntries()); err != nil {
		return nil, fmt.Errorf("%s: %v", settingsPath, err)
	}
	if cfg.Project != "" {
		enabled := stringList(settings["enabledMcpjsonServers"])
		if !slices.Contains(enabled, MCPServerName) {
			enabled = append(enabled, MCPServerName)
		}
		settings["enabledMcpjsonServers"] = enabled
	}
	// The tool permissions go to the user's settings: Claude Code ignores a
	// project's permissions.allow until the workspace is trusted interactively, and
	// -p never asks.
	userPath := filepath.Join(cfg.Home, ".claude", "settings.json")
	user := settings
	if userPath != settingsPath {
		if user, err = readJSON(userPath); err != nil {
			return nil, err
		}
	}
	if err := allowTools(user, userPath); err != nil {
		return nil, err
	}
	mcp, err := readJSON(mcpPath)
	if err != nil {
		return nil, err
	}
	servers, ok := mcp["mcpServers"].(map[string]any)
	if mcp["mcpServers"] != nil && !ok {
		return nil, fmt.Errorf(`%s: "mcpServers" is not an object`, mcpPath)
	}
	if servers == nil {
		servers = map[string]any{}
	}
	// alwaysLoad keeps the tools in the model's tool list instead of behind Claude
	// Code's tool search, so the notice's tool is there when the notice is.
	servers[MCPServerName] = map[string]any{"type": "stdio", "command": cfg.Binary, "args": []any{"mcp", "--url", cfg.URL}, "alwaysLoad": true}
	mcp["mcpServers"] = servers
	if err := writeJSON(settingsPath, settings); err != nil {
		return nil, err
	}
	if err := writeJSON(mcpPath, mcp); err != nil {
		return nil, err
	}
	files := []string{settingsPath, mcpPath}
	if userPath != settingsPath {
		if err := writeJSON(userPath, user); err != nil {
			return nil, err
		}
		files = append(files, userPath)
	}
	return files, nil
}

// allowTools adds the MCP tools to a Claude Code settings object's permissions.allow.
func allowTools(settings map[string]any, path string) error {
	perms, ok := settings["permissions"].(map[string]any)
	if settings["permissions"] != nil && !ok {
		return fmt.Errorf(`%s: "permissions" is not an object`, path)
	}
	if perms == nil {
		perms = map[string]any{}
	}
	allow := stringList(perms["allow"])
	for _, t := range mcpTools {
		if name := "mcp__" + MCPServerName + "__" + t; !slices.Contains(allow, name) {
			allow = append(allow, name)
		}
	}
	perms["allow"] = allow
	settings["permissions"] = perms
	return nil
}

func installCodex(cfg InstallConfig) ([]string, error) {
	dir := cfg.CodexHome
	if cfg.Project != "" {
		dir = filepath.Join(cfg.Project, ".codex")
	} else if dir == "" {
		dir = filepath.Join(cfg.Home, ".codex")
	}
	hooksPath, configPath := filepath.Join(dir, "hooks.json"), filepath.Join(dir, "config.toml")
	hooks, err := readJSON(hooksPath)
	if err != nil {
		return nil, err
	}
	if err := mergeHooks(hooks, cfg.hookEntries()); err != nil {
		return nil, fmt.Errorf("%s: %v", hooksPath, err)
	}
	old, err := os.ReadFile(configPath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	block := "[mcp_servers." + MCPServerName + "]\ncommand = " + tomlString(cfg.Binary) + "\nargs = [" +
		tomlString("mcp") + ", " + tomlString("--url") + ", " + tomlString(cfg.URL) + "]\n"
	config, err := replaceTOMLTable(old, "mcp_servers."+MCPServerName, block)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", configPath, err)
	}
	if err := writeJSON(hooksPath, hooks); err != nil {
		return nil, err
	}
	if err := writeFile(configPath, config); err != nil {
		return nil, err
	}
	return []string{hooksPath, configPath}, nil
}

// replaceTOMLTable returns doc with the table name and its sub-tables replaced by
// block, or block appended when doc has no such table. The rest of doc, comments
// included, is kept byte for byte.
func replaceTOMLTable(doc []byte, name, block string) ([]byte, error) {
	lines := strings.SplitAfter(string(doc), "\n")
	start, end := -1, len(lines)
	for i, l := range lines {
		h, ok := tomlHeader(l)
		if !ok {
			if strings.HasPrefix(strings.TrimSpace(l), name+" ") || strings.HasPrefix(strings.TrimSpace(l), name+"=") {
				return nil, fmt.Errorf("%s is written as a dotted key; edit it by hand or move it to a [%s] table", name, name)
			}
			continue
		}
		switch {
		case start < 0 && (h == name || strings.HasPrefix(h, name+".")):
			start = i
		case start >= 0 && h != name && !strings.HasPrefix(h, name+"."):
			end = i
		}
		if start >= 0 && end < len(lines) {
			break
		}
	}
	if start < 0 {
		out := string(doc)
		if out != "" && !strings.HasSuffix(out, "\n") {
			out += "\n"
		}
		if out != "" {
			out += "\n"
		}
		return []byte(out + block), nil
	}
	sep := ""
	if end < len(lines) {
		sep = "\n"
	}
	return []byte(strings.Join(lines[:start], "") + block + sep + strings.Join(lines[end:], "")), nil
}

// tomlHeader returns the name of a table header line, "[a.b]" or "[[a.b]]".
func tomlHeader(line string) (string, bool) {
	l := strings.TrimSpace(line)
	if i := strings.Index(l, "#"); i >= 0 && !strings.Contains(l[:i], `"`) {
		l = strings.TrimSpace(l[:i])
	}
	if !strings.HasPrefix(l, "[") || !strings.HasSuffix(l, "]") {
		return "", false
	}
	l = strings.TrimSpace(strings.Trim(l, "[]"))
	return strings.ReplaceAll(l, " ", ""), true
}

// tomlString is s as a TOML basic string: JSON's escapes are TOML's.
func tomlString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func stringList(v any) []string {
	list, _ := v.([]any)
	var out []string
	for _, x := range list {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// readJSON reads a JSON object file; a missing or empty file is an empty object.
func readJSON(path string) (map[string]any, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) || err == nil && len(bytes.TrimSpace(b)) == 0 {
		return map[string]any{}, nil
	}
	if err != nil {
		return nil, err
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("%s is not a JSON object (left unchanged): %v", path, err)
	}
	return v, nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(path, append(b, '\n'))
}

// writeFile replaces path's content through a temporary file and a rename, keeping
// its mode; a new file gets 0600, since settings may name a token file.
func writeFile(path string, b []byte) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, b) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	mode := os.FileMode(0o600)
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// shellJoin quotes args for the shell the harnesses run hook commands with.
func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a != "" && !strings.ContainsFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-:=@+", r))
		}) {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}
