package wsgorilla

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/99designs/gqlgen/graphql/handler/transport"
)

// gqlgenChecked is the gqlgen version whose unexported WebSocket message structs
// write.go's messageLayout was checked against (TestGqlgenMessageLayout).
const gqlgenChecked = "v0.17.98"

// gqlgenModule is gqlgen's module path.
const gqlgenModule = "github.com/99designs/gqlgen"

// write.go reads gqlgen's unexported server message structs by reflection (gqlgen
// v0.17.98 exports no type or interface for a message: its exchangers pass a
// *graphqltransportwsMessage or *graphqlwsMessage to WebsocketConn.WriteJSON as an
// any). This test fails on any other gqlgen version, to make whoever upgrades it
// re-check that reading.
func TestGqlgenVersionPinned(t *testing.T) {
	if got := gqlgenVersion(t); got != gqlgenChecked {
		t.Fatalf(`gqlgen is %s, but internal/wsgorilla/write.go's reflection over gqlgen's unexported WebSocket
message structs was checked against %s. Before changing gqlgenChecked, re-check in
graphql/handler/transport of the new version that:
  - graphqltransportwsMessage (websocket_graphql_transport_ws.go) and graphqlwsMessage
    (websocket_graphqlws.go) still have exactly the exported fields, in this order,
    Payload json.RawMessage `+"`json:\"payload,omitempty\"`"+`, ID string `+"`json:\"id,omitempty\"`"+` and
    Type (a string type whose MarshalText returns the string) `+"`json:\"type\"`"+`;
  - their exchangers' Send still passes a pointer to that struct to WebsocketConn.WriteJSON
    and nothing else is sent through it;
  - gqlgen does not now export a message type or a way to write a frame that would
    replace the reflection (then use it and drop messageLayout);
then run TestGqlgenMessageLayout and TestGqlgenMessagesTakeTheFastPath (a changed
shape silently falls back to encoding/json, still correct but slower).`, got, gqlgenChecked)
	}
}

// gqlgenVersion returns the gqlgen version linked into the test binary: from the
// build information when it lists dependencies (a test binary's may not), else from
// the module cache directory in the source path of a gqlgen function
// (…/github.com/99designs/gqlgen@v0.17.98/…, also under -trimpath), else the version
// the repository's go.mod requires (vendored builds).
func gqlgenVersion(t *testing.T) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == gqlgenModule {
				if m.Replace != nil {
					return m.Replace.Version
				}
				return m.Version
			}
		}
	}
	file, _ := runtime.FuncForPC(reflect.ValueOf(transport.AppendCloseReason).Pointer()).FileLine(0)
	if _, rest, ok := strings.Cut(filepath.ToSlash(file), gqlgenModule+"@"); ok {
		v, _, _ := strings.Cut(rest, "/")
		return v
	}
	mod, err := os.ReadFile(filepath.Join("..", "..", "go.mod"))
	if err != nil {
		t.Fatalf("gqlgen's version: not in the build information nor in %s, and go.mod: %v", file, err)
	}
	for _, line := range strings.Split(string(mod), "\n") {
		if f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require")); len(f) >= 2 && f[0] == gqlgenModule {
			return f[1]
		}
	}
	t.Fatalf("gqlgen's version: not in the build information, in %s nor in go.mod", file)
	return ""
}

// The layout the adapter finds in gqlgen's message struct of each protocol is the
// expected one: gqlgen's transport package, the struct of that protocol, and the
// exported fields Payload (json.RawMessage), ID (string) and Type (a string type), in
// that order, with the JSON names appendMessage writes.
func TestGqlgenMessageLayout(t *testing.T) {
	for proto, name := range map[string]string{
		protoTransportWS: "graphqltransportwsMessage",
		protoLegacyWS:    "graphqlwsMessage",
	} {
		t.Run(proto, func(t *testing.T) {
			l := gqlgenConn(t, proto).layout.Load()
			if l == nil {
				t.Fatal("no message went through WriteJSON")
			}
			const pkg = gqlgenModule + "/graphql/handler/transport"
			if l.t.PkgPath() != pkg || l.t.Name() != name {
				t.Errorf("gqlgen sent a %s.%s, want %s.%s", l.t.PkgPath(), l.t.Name(), pkg, name)
			}
			if !l.ok {
				t.Fatalf("layout of %s not recognised: %+v", l.t, l)
			}
			var exported []string
			for i := range l.t.NumField() {
				if f := l.t.Field(i); f.IsExported() {
					exported = append(exported, f.Name+" "+f.Tag.Get("json"))
				}
			}
			if want := []string{"Payload payload,omitempty", "ID id,omitempty", "Type type"}; !reflect.DeepEqual(exported, want) {
				t.Errorf("exported fields %q, want %q", exported, want)
			}
			for field, i := range map[string]int{"Payload": l.payload, "ID": l.id, "Type": l.kind} {
				if got := l.t.Field(i).Name; got != field {
					t.Errorf("the layout reads %s from field %d, which is %s", field, i, got)
				}
			}
			if got := l.t.Field(l.payload).Type; got != reflect.TypeFor[json.RawMessage]() {
				t.Errorf("Payload is a %s", got)
			}
		})
	}
}
