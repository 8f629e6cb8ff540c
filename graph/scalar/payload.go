package scalar

import (
	"bytes"
	"encoding/json"
	"io"
	"strconv"

	"github.com/99designs/gqlgen/graphql"

	"github.com/awareness/awareness/internal/awareness"
)

// MarshalPayload writes an event payload as the JSON scalar, byte for byte what
// MarshalJSONObject writes for the payload's map (keys sorted, strings escaped as
// encoding/json escapes them), without building the map or reflecting over it: a
// sessionStatus page writes up to 500 of them. The zero payload is null.
func MarshalPayload(p awareness.Payload) graphql.Marshaler {
	if p.IsZero() {
		return graphql.Null
	}
	return graphql.WriterFunc(func(w io.Writer) {
		b := make([]byte, 0, 64)
		b = append(b, '{')
		sep := func() {
			if len(b) > 1 {
				b = append(b, ',')
			}
		}
		if p.Channel != "" {
			b = append(b, `"channel":`...)
			b = appendJSONString(b, p.Channel)
		}
		if p.Outcome != "" {
			sep()
			b = append(b, `"outcome":`...)
			b = appendJSONString(b, string(p.Outcome))
		}
		if p.Turns != 0 {
			sep()
			b = append(b, `"turns":`...)
			b = strconv.AppendInt(b, int64(p.Turns), 10)
		}
		b = append(b, '}')
		_, _ = w.Write(b)
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

// appendJSONString appends s as encoding/json encodes a string (with its HTML-safe
// escapes); plain ASCII, the usual case, is copied as is.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
