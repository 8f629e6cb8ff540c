package mcpserver

import (
	"reflect"
	"strings"
	"testing"

	"github.com/awareness/awareness/internal/awareness"
)

// TestListToolNamesEverySessionKind: the sessions tool's schema lists the session
// kinds of the core's table, in order.
func TestListToolNamesEverySessionKind(t *testing.T) {
	f, _ := reflect.TypeFor[listIn]().FieldByName("Kinds")
	kinds := make([]string, len(awareness.AllSessionKinds))
	for i, k := range awareness.AllSessionKinds {
		kinds[i] = string(k)
	}
	want := "(" + strings.Join(kinds, ", ") + ")"
	if got := f.Tag.Get("jsonschema"); !strings.Contains(got, want) {
		t.Errorf("listIn.Kinds is described as %q, which does not list %s", got, want)
	}
}
