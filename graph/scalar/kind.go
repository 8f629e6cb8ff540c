package scalar

import (
	"github.com/99designs/gqlgen/graphql"

	"github.com/awareness/awareness/internal/awareness"
)

// MarshalEventKind writes an EventKind by its name. A kind the service does not know
// (an event a newer version wrote) is written "", as the fast path writes it.
func MarshalEventKind(k awareness.EventKind) graphql.Marshaler {
	if !k.Valid() {
		k = ""
	}
	return graphql.MarshalString(string(k))
}

// UnmarshalEventKind reads an EventKind by its name; the document's validation has
// already checked the name against the schema's enum.
func UnmarshalEventKind(v any) (awareness.EventKind, error) {
	s, err := UnmarshalString(v)
	return awareness.EventKind(s), err
}
