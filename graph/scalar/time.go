package scalar

import (
	"time"

	"github.com/99designs/gqlgen/graphql"

	"github.com/awareness/awareness/internal/awareness"
)

// MarshalTime writes the Time scalar: RFC 3339 with nanoseconds, in UTC. It is
// graphql.MarshalTime after a conversion to UTC.
func MarshalTime(t time.Time) graphql.Marshaler {
	return graphql.MarshalTime(t.UTC())
}

// UnmarshalTime reads the Time scalar with graphql.UnmarshalTime (RFC 3339, with or
// without fractional seconds); anything else, the empty string included (gqlgen reads
// it as the zero time, which the service would take as "now"), is INVALID_ARGUMENT.
func UnmarshalTime(v any) (time.Time, error) {
	if s, ok := v.(string); !ok || s == "" {
		return time.Time{}, awareness.Errorf(awareness.EINVALID, "Time must be an RFC 3339 timestamp such as 2026-01-02T15:04:05Z")
	}
	t, err := graphql.UnmarshalTime(v)
	if err != nil {
		return time.Time{}, awareness.Errorf(awareness.EINVALID, "Time must be an RFC 3339 timestamp such as 2026-01-02T15:04:05Z")
	}
	return t, nil
}
