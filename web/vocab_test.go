package web_test

import (
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/web"
)

// TestDashboardKnowsEveryKind: the dashboard takes the event kinds and their roles
// from the service (the eventKinds query, app/vocab.js; SIG-1), so no script or style
// names a kind but those whose meaning a view uses: child_spawned (it names the parent)
// and the two a child run ends with (kindClass's success and failure);
// and the sessions filter's SESSION_KINDS is the core's table (KEY-2).
func TestDashboardKnowsEveryKind(t *testing.T) {
	read := func(name string) string {
		b, err := fs.ReadFile(web.FS, name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	quoted := regexp.MustCompile(`'([a-z_]+)'`)
	values := func(src string) []string {
		var out []string
		for _, m := range quoted.FindAllStringSubmatch(src, -1) {
			out = append(out, m[1])
		}
		return out
	}
	named := map[awareness.EventKind]bool{awareness.ChildSpawned: true, awareness.RunCompleted: true, awareness.RunFailed: true}
	files, err := fs.Glob(web.FS, "app/*.js")
	if err != nil {
		t.Fatal(err)
	}
	views, _ := fs.Glob(web.FS, "app/views/*.js")
	for _, f := range append(append(files, views...), "app/style.css") {
		src := read(f)
		for _, k := range awareness.AllEventKinds {
			if named[k] {
				continue
			}
			if strings.Contains(src, "'"+string(k)+"'") || strings.Contains(src, ".c-"+string(k)) {
				t.Errorf("%s names the event kind %s: take it from the service's eventKinds (app/vocab.js)", f, k)
			}
		}
	}

	var sessionKinds []string
	for _, k := range awareness.AllSessionKinds {
		sessionKinds = append(sessionKinds, string(k))
	}
	sl := regexp.MustCompile(`export const SESSION_KINDS = \[(.*?)\];`).FindStringSubmatch(read("app/views/sessions.js"))
	if sl == nil {
		t.Fatal("app/views/sessions.js declares no SESSION_KINDS")
	}
	if got := values(sl[1]); !slices.Equal(got, sessionKinds) {
		t.Errorf("SESSION_KINDS = %q, want %q", got, sessionKinds)
	}
}
