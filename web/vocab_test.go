package web_test

import (
	"io/fs"
	"regexp"
	"slices"
	"testing"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/web"
)

// TestDashboardKnowsEveryKind: the dashboard's lists of kinds are the core's tables
// (SIG-1, KEY-2): the chart's and filter's EVENT_KINDS in schema order, a colour per
// event kind in style.css, the notifying kinds' badge in dom.js, and the sessions
// filter's SESSION_KINDS.
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
	var all, notifying []string
	for _, k := range awareness.AllEventKinds {
		all = append(all, string(k))
		if k.Notifies() {
			notifying = append(notifying, string(k))
		}
	}

	list := regexp.MustCompile(`(?s)export const EVENT_KINDS = \[(.*?)\];`).FindStringSubmatch(read("app/views/components.js"))
	if list == nil {
		t.Fatal("app/views/components.js declares no EVENT_KINDS")
	}
	if got := values(list[1]); !slices.Equal(got, all) {
		t.Errorf("EVENT_KINDS = %q, want %q", got, all)
	}

	css := read("app/style.css")
	for _, k := range all {
		if !regexp.MustCompile(`\.c-` + k + ` \{ fill: #[0-9a-f]{6}; background: #[0-9a-f]{6}; \}`).MatchString(css) {
			t.Errorf("app/style.css has no colour .c-%s", k)
		}
	}

	notify := regexp.MustCompile(`(?m)^ *(case .*) return 'k-notify';$`).FindStringSubmatch(read("app/dom.js"))
	if notify == nil {
		t.Fatal("app/dom.js's kindClass has no k-notify case")
	}
	if got := values(notify[1]); !slices.Equal(got, notifying) {
		t.Errorf("kindClass gives k-notify to %q, want the notifying kinds %q", got, notifying)
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
