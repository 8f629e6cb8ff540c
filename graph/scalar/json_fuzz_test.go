package scalar_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/awareness/awareness/graph/scalar"
	"github.com/awareness/awareness/internal/awareness"
)

// FuzzJSONObject decodes arbitrary JSON the way gqlgen decodes variables (UseNumber)
// and feeds it to the JSON scalar: a non-object is rejected with INVALID_ARGUMENT, an
// object is accepted, and writing it back never panics and gives the same object.
func FuzzJSONObject(f *testing.F) {
	for _, s := range []string{
		`{"outcome":"timeout","turns":2}`, `{}`, `null`, `[1,2]`, `"x"`, `3.5`, `true`,
		`{"a":{"b":[1,{"c":null}]},"d":-0.0e+12}`, `{"\u00e9":"\ud83d\ude00","k":"\u0000"}`,
		`{"big":123456789012345678901234567890}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			return // gqlgen rejects the request before any scalar sees it
		}
		m, err := scalar.UnmarshalJSONObject(v)
		if err != nil {
			if awareness.ErrorCode(err) != awareness.EINVALID {
				t.Fatalf("UnmarshalJSONObject(%s): %v, want INVALID_ARGUMENT", data, err)
			}
			if _, isObj := v.(map[string]any); isObj {
				t.Fatalf("an object was rejected: %s", data)
			}
			return
		}
		if m == nil {
			if v != nil {
				t.Fatalf("UnmarshalJSONObject(%s) = nil", data)
			}
			return
		}
		var buf bytes.Buffer
		scalar.MarshalJSONObject(m).MarshalGQL(&buf)
		dec = json.NewDecoder(&buf)
		dec.UseNumber()
		var back map[string]any
		if err := dec.Decode(&back); err != nil {
			t.Fatalf("MarshalJSONObject wrote invalid JSON %q: %v", buf.String(), err)
		}
		if !reflect.DeepEqual(back, m) {
			t.Fatalf("round trip changed the object:\n in  %#v\n out %#v", m, back)
		}
	})
}
