// Package scalar holds the custom GraphQL scalars of the schema. Their input errors are
// *awareness.Error values with code INVALID_ARGUMENT, so that the error presenter
// reports them like every other rejected input (ERR-1).
package scalar

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/99designs/gqlgen/graphql"

	"github.com/awareness/awareness/internal/awareness"
)

// MarshalJSONObject writes the JSON scalar: a small JSON object (event payloads, SIG-2).
// A nil map is written as null.
func MarshalJSONObject(v map[string]any) graphql.Marshaler {
	if v == nil {
		return graphql.Null
	}
	return graphql.WriterFunc(func(w io.Writer) {
		b, err := json.Marshal(v)
		if err != nil {
			// Only maps built by the service reach this point; they always encode.
			panic(fmt.Errorf("scalar: encode JSON object: %w", err))
		}
		_, _ = w.Write(b)
	})
}

// UnmarshalJSONObject reads the JSON scalar. Only objects (and null) are accepted.
func UnmarshalJSONObject(v any) (map[string]any, error) {
	switch m := v.(type) {
	case map[string]any:
		return m, nil
	case nil:
		return nil, nil
	default:
		return nil, awareness.Errorf(awareness.EINVALID, "JSON must be an object, got %s", jsonKind(v))
	}
}

func jsonKind(v any) string {
	switch v.(type) {
	case []any:
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case json.Number, float64, float32, int, int64, int32:
		return "a number"
	}
	return fmt.Sprintf("%T", v)
}
