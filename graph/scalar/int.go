package scalar

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/99designs/gqlgen/graphql"

	"github.com/awareness/awareness/internal/awareness"
)

// The Int scalar, strictly as the GraphQL specification defines it: a 32-bit signed
// integer. gqlgen's own unmarshalers also take a string ("1") and any 64-bit value;
// these refuse both with INVALID_ARGUMENT, on every transport alike (the value reaches
// them as an int64 from a document literal, a json.Number from an HTTP body, or a
// float64 from other JSON decoders). The Go type behind a field or argument (int,
// int32, int64) does not widen what the API accepts. Output is gqlgen's.

// MarshalInt writes an Int bound to int.
func MarshalInt(i int) graphql.Marshaler { return graphql.MarshalInt(i) }

// UnmarshalInt reads an Int into int.
func UnmarshalInt(v any) (int, error) {
	n, err := int32Of(v)
	return int(n), err
}

// MarshalInt64 writes an Int bound to int64.
func MarshalInt64(i int64) graphql.Marshaler { return graphql.MarshalInt64(i) }

// UnmarshalInt64 reads an Int into int64.
func UnmarshalInt64(v any) (int64, error) {
	n, err := int32Of(v)
	return int64(n), err
}

// MarshalInt32 writes an Int bound to int32.
func MarshalInt32(i int32) graphql.Marshaler { return graphql.MarshalInt32(i) }

// UnmarshalInt32 reads an Int into int32.
func UnmarshalInt32(v any) (int32, error) { return int32Of(v) }

func int32Of(v any) (int32, error) {
	var n int64
	switch v := v.(type) {
	case int:
		n = int64(v)
	case int32:
		return v, nil
	case int64:
		n = v
	case json.Number:
		i, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			return 0, intError(v)
		}
		n = i
	case float64:
		if v != math.Trunc(v) || math.IsInf(v, 0) || v < math.MinInt32 || v > math.MaxInt32 {
			return 0, intError(v)
		}
		n = int64(v)
	default:
		return 0, intError(v)
	}
	if n < math.MinInt32 || n > math.MaxInt32 {
		return 0, intError(n)
	}
	return int32(n), nil
}

func intError(v any) error {
	if s, ok := v.(string); ok {
		return awareness.Errorf(awareness.EINVALID, "Int must be a JSON number, not the string %q", truncate(s))
	}
	return awareness.Errorf(awareness.EINVALID, "Int must be a whole number from -2147483648 to 2147483647 (32 bits), got %s", truncate(fmt.Sprint(v)))
}

// MarshalString writes the String scalar (gqlgen's).
func MarshalString(s string) graphql.Marshaler { return graphql.MarshalString(s) }

// UnmarshalString reads the String scalar: a JSON string only. gqlgen's own
// unmarshaler turns a number or a boolean into its text (12345 → "12345"); this one
// refuses them with INVALID_ARGUMENT, as a document literal is refused by validation.
func UnmarshalString(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case nil:
		return "", nil // a null reaches a String only where the schema allows it
	default:
		return "", awareness.Errorf(awareness.EINVALID, "String must be a JSON string, got %s", truncate(fmt.Sprint(v)))
	}
}

func truncate(s string) string {
	const n = 40
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
