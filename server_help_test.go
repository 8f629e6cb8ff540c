package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// awareness -h and --help list the commands; each command's --help is written for its
// users: a usage line, what it does, its flags, on standard output, exit 0.
func TestHelpListsCommandsAndEachCommandExplainsItself(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, &stdout, &stderr); code != exitOK {
			t.Errorf("%q: exit %d, want 0 (stderr %q)", args, code, stderr.String())
		}
		for _, cmd := range []string{"serve", "demo", "status", "sessions", "import", "help"} {
			if !strings.Contains(stdout.String(), "awareness "+cmd) && !strings.Contains(stdout.String(), "awareness ["+cmd+"]") {
				t.Errorf("%q does not list %s:\n%s", args, cmd, stdout.String())
			}
		}
	}
	for _, cmd := range []string{"serve", "demo", "status", "sessions", "import"} {
		for _, args := range [][]string{{cmd, "--help"}, {cmd, "-h"}, {"help", cmd}} {
			var stdout, stderr bytes.Buffer
			if code := run(context.Background(), args, &stdout, &stderr); code != exitOK {
				t.Errorf("%q: exit %d, want 0 (stderr %q)", args, code, stderr.String())
			}
			out := stdout.String()
			if !strings.HasPrefix(out, "Usage: awareness "+cmd) || !strings.Contains(out, "Flags:") || !strings.Contains(out, "-db") {
				t.Errorf("%q: want a usage line, a Flags section and -db:\n%s", args, out)
			}
			for _, bad := range []string{"Usage of ", "internal/", "(see "} {
				if strings.Contains(out, bad) {
					t.Errorf("%q: help contains %q, which is not written for users:\n%s", args, bad, out)
				}
			}
		}
	}
	var stdout bytes.Buffer
	run(context.Background(), []string{"serve", "--help"}, &stdout, &bytes.Buffer{})
	for _, want := range []string{"/metrics", "OTEL_EXPORTER_OTLP_ENDPOINT", "-metrics-token-file", "-catalog ID=DIR", "-allowed-hosts", "-query-rate", "-max-streams", "DNS rebinding"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("serve --help does not mention %s", want)
		}
	}
}

// readmeFlag is one row of the README's configuration table.
type readmeFlag struct{ env, def string }

// readmeConfigTable reads the flag table under "## Configuration" in README.md.
func readmeConfigTable(t *testing.T) map[string]readmeFlag {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Configuration\n")
	if !ok {
		t.Fatal("README.md has no Configuration section")
	}
	rows := map[string]readmeFlag{}
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(line, "## ") {
			break
		}
		cells := strings.Split(line, "|")
		if len(cells) < 5 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`--") {
			continue
		}
		unquote := func(s string) string { return strings.Trim(strings.TrimSpace(s), "`") }
		rows[strings.TrimPrefix(unquote(cells[1]), "--")] = readmeFlag{env: unquote(cells[2]), def: unquote(cells[3])}
	}
	return rows
}

// helpFlag is one flag of a command's --help.
type helpFlag struct{ usage, def string }

var helpDefault = regexp.MustCompile(`\(default "?(.*?)"?\)$`)

// helpFlags reads the flags section of a command's --help (flag.PrintDefaults).
func helpFlags(t *testing.T, args ...string) map[string]helpFlag {
	t.Helper()
	var stdout bytes.Buffer
	if code := run(context.Background(), args, &stdout, &bytes.Buffer{}); code != exitOK {
		t.Fatalf("%q: exit %d", args, code)
	}
	flags := map[string]helpFlag{}
	name := ""
	for _, line := range strings.Split(stdout.String(), "\n") {
		switch {
		case strings.HasPrefix(line, "  -"):
			name, _, _ = strings.Cut(strings.TrimPrefix(line, "  -"), " ")
			flags[name] = helpFlag{}
		case name != "" && strings.HasPrefix(line, "    \t"):
			f := flags[name]
			f.usage = strings.TrimSpace(f.usage + " " + strings.TrimSpace(line))
			if m := helpDefault.FindStringSubmatch(f.usage); m != nil {
				f.def = m[1]
			}
			flags[name] = f
		default:
			name = ""
		}
	}
	return flags
}

// The README's configuration table is serve's --help: the same flags, each with the
// same environment variable and default.
func TestServeHelpMatchesTheREADMETable(t *testing.T) {
	table := readmeConfigTable(t)
	flags := helpFlags(t, "serve", "--help")
	if len(flags) < 10 {
		t.Fatalf("serve --help lists %d flags", len(flags))
	}
	sameDefault := func(readme, help string) bool {
		switch readme {
		case "*(none)*", "false":
			return help == ""
		}
		if readme == help {
			return true
		}
		if a, err := time.ParseDuration(readme); err == nil {
			b, err := time.ParseDuration(help)
			return err == nil && a == b
		}
		a, err1 := strconv.ParseFloat(readme, 64)
		b, err2 := strconv.ParseFloat(help, 64)
		return err1 == nil && err2 == nil && a == b
	}
	for name, h := range flags {
		row, ok := table[name]
		if !ok {
			t.Errorf("--%s is in serve --help but not in the README's configuration table", name)
			continue
		}
		if !strings.Contains(h.usage, "($"+row.env) {
			t.Errorf("--%s: the README says $%s, serve --help says %q", name, row.env, h.usage)
		}
		if !sameDefault(row.def, h.def) {
			t.Errorf("--%s: the README's default is %q, serve --help's %q", name, row.def, h.def)
		}
	}
	for name := range table {
		if _, ok := flags[name]; !ok {
			t.Errorf("--%s is in the README's configuration table but serve does not take it", name)
		}
	}
}

// What the help texts say about every command and endpoint is true: the commands
// named as taking --db take it (and mcp, which does not, is not among them), and serve
// --help names every endpoint and transport the README lists.
func TestHelpTextsAreTrue(t *testing.T) {
	var usage bytes.Buffer
	run(context.Background(), []string{"help"}, &usage, &bytes.Buffer{})
	m := regexp.MustCompile(`\n((?:\w+, )*\w+ and \w+) take --db`).FindStringSubmatch(usage.String())
	if m == nil {
		t.Fatalf("the usage text does not say which commands take --db:\n%s", usage.String())
	}
	takesDB := map[string]bool{}
	for _, c := range strings.FieldsFunc(strings.ReplaceAll(m[1], " and ", ","), func(r rune) bool { return r == ',' || r == ' ' }) {
		takesDB[c] = true
	}
	for _, cmd := range []string{"serve", "demo", "status", "sessions", "import", "mcp"} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), []string{cmd, "--db", filepath.Join(t.TempDir(), "a.db"), "--help"}, &stdout, &stderr)
		if accepted := code == exitOK; accepted != takesDB[cmd] {
			t.Errorf("%s --db: exit %d (%s); the usage text says it takes --db: %v", cmd, code, strings.TrimSpace(stderr.String()), takesDB[cmd])
		}
	}

	var serveHelp bytes.Buffer
	run(context.Background(), []string{"serve", "--help"}, &serveHelp, &bytes.Buffer{})
	about, _, _ := strings.Cut(serveHelp.String(), "Flags:")
	about = strings.Join(strings.Fields(about), " ")
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, endpoints, ok := strings.Cut(string(readme), "\nEndpoints: ")
	endpoints, _, _ = strings.Cut(endpoints, "\n\n")
	if !ok {
		t.Fatal("README.md has no Endpoints: paragraph")
	}
	paths := regexp.MustCompile("`(/[a-z]*)`").FindAllStringSubmatch(endpoints, -1)
	if len(paths) < 6 {
		t.Fatalf("README's endpoints: %q", endpoints)
	}
	for _, p := range paths {
		if !regexp.MustCompile(`(^|[^a-z])` + regexp.QuoteMeta(p[1]) + `([^a-z]|$)`).MatchString(about) {
			t.Errorf("serve --help does not name the endpoint %s the README lists", p[1])
		}
	}
	for _, transport := range []string{"POST", "GET", "WebSocket", "Server-Sent Events"} {
		if !strings.Contains(endpoints, transport) || !strings.Contains(about, transport) {
			t.Errorf("%q: in the README's endpoints %v, in serve --help %v", transport, strings.Contains(endpoints, transport), strings.Contains(about, transport))
		}
	}
	if u := helpFlags(t, "serve", "--help")["allowed-origins"].usage; !strings.Contains(u, "HTTP") || !strings.Contains(u, "SSE") || !strings.Contains(u, "WebSocket") {
		t.Errorf("--allowed-origins: %q does not say it covers HTTP, SSE and WebSockets", u)
	}
}
