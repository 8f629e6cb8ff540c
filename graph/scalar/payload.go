package scalar

import (
	"bytes"
	"encoding/json"
	"io"

	"github.com/99designs/gqlgen/graphql"

	"github.com/awareness/awareness/internal/awareness"
)

// MarshalPayload writes an event payload as the JSON scalar, byte for byte what
// MarshalJSONObject writes for the payload's map (Payload.AppendJSON). The zero payload
// is null.
func MarshalPayload(p awareness.Payload) graphql.Marshaler {
	if p.IsZero() {
		return graphql.Null
	}
	return graphql.WriterFunc(func(w io.Writer) {
		_, _ = w.Write(p.AppendJSON(make([]byte, 0, 64)))
	})
}

// UnmarshalPayload reads a payload given as the JSON scalar; only the payload's own
// fields are accepted. (The API takes payload fields as separate arguments; this
// exists because gqlgen binds a scalar's Go type in both directions.)
func UnmarshalPayload(v any) (awareness.Payload, error) {
	m, err := UnmarshalJSONObject(v)
	if err != nil || m == nil {
		return awareness.Payload{}, err
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return awareness.Payload{}, awareness.Errorf(awareness.EINVALID, "payload: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var p awareness.Payload
	if err := dec.Decode(&p); err != nil {
		return awareness.Payload{}, awareness.Errorf(awareness.EINVALID, "payload: %v", err)
	}
	return p, nil
}
