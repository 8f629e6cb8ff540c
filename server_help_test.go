package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
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
	for _, want := range []string{"/metrics", "OTEL_EXPORTER_OTLP_ENDPOINT", "-metrics-token-file", "-catalog ID=DIR", "-sqlite-checkpoint", "-allowed-hosts", "-query-rate", "-max-streams", "DNS rebinding"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("serve --help does not mention %s", want)
		}
	}
}
