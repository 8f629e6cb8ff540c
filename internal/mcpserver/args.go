package mcpserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/jsontext"
)

// decodeArgs decodes a tool's arguments into T strictly, every refusal an
// INVALID_ARGUMENT a person can act on (ERR-1), never a Go decoder message: the
// arguments must be a JSON object of T's fields only, each required field present and
// not null, each value of its field's type, integers whole and 32 bits as the
// GraphQL Int. The jsontext text rule applies as on every transport.
func decodeArgs[T any](tool string, raw json.RawMessage) (T, error) {
	var in T
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		raw = []byte("{}")
	}
	if !jsontext.Valid(raw) {
		return in, awareness.Errorf(awareness.EINVALID, "%s", jsontext.Message)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return in, awareness.Errorf(awareness.EINVALID, "the arguments of %s must be a JSON object", tool)
	}
	t := reflect.TypeFor[T]()
	names := argNames(t)
	for name, v := range fields {
		if !slices.Contains(names, name) {
			return in, awareness.Errorf(awareness.EINVALID, "%s takes no argument %q; its arguments are %s", tool, name, strings.Join(names, ", "))
		}
		if string(bytes.TrimSpace(v)) == "null" && slices.Contains(requiredArgs(t), name) {
			return in, awareness.Errorf(awareness.EINVALID, "argument %s of %s must not be null", name, tool)
		}
	}
	for _, name := range requiredArgs(t) {
		if _, ok := fields[name]; !ok {
			return in, awareness.Errorf(awareness.EINVALID, "%s needs the argument %s", tool, name)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return in, argError(tool, err)
	}
	return in, nil
}

// argError turns a decoder error into a coded refusal without the decoder's words.
func argError(tool string, err error) error {
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		name := te.Field
		if name == "" {
			name = "the arguments"
		}
		got := te.Value
		switch te.Type.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			if strings.HasPrefix(got, "number") {
				return awareness.Errorf(awareness.EINVALID, "%s must be a whole number from -2147483648 to 2147483647 (32 bits), got %s", name, strings.TrimSpace(strings.TrimPrefix(got, "number")))
			}
			return awareness.Errorf(awareness.EINVALID, "%s must be a whole number, not a JSON %s", name, got)
		case reflect.String:
			return awareness.Errorf(awareness.EINVALID, "%s must be a string, not a JSON %s", name, jsonKind(got))
		case reflect.Bool:
			return awareness.Errorf(awareness.EINVALID, "%s must be true or false, not a JSON %s", name, jsonKind(got))
		case reflect.Slice, reflect.Array:
			return awareness.Errorf(awareness.EINVALID, "%s must be a list, not a JSON %s", name, jsonKind(got))
		default:
			return awareness.Errorf(awareness.EINVALID, "%s must be an object, not a JSON %s", name, jsonKind(got))
		}
	}
	if ae, ok := errors.AsType[*awareness.Error](err); ok {
		return ae // a field's own UnmarshalJSON (enums, times)
	}
	if rest, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return awareness.Errorf(awareness.EINVALID, "%s takes no argument %s inside a list or object", tool, rest)
	}
	return awareness.Errorf(awareness.EINVALID, "the arguments of %s are not valid JSON", tool)
}

// jsonKind names the JSON type of a decoder's value description, as "number 1.5".
func jsonKind(v string) string {
	k, _, _ := strings.Cut(v, " ")
	return k
}

// argNames lists the JSON names of a struct's fields, in order.
func argNames(t reflect.Type) []string {
	var out []string
	for f := range t.Fields() {
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}

// requiredArgs lists the fields without omitempty: the required arguments, as in the
// input schema inferred from the type.
func requiredArgs(t reflect.Type) []string {
	var out []string
	for f := range t.Fields() {
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" && !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") {
			out = append(out, name)
		}
	}
	return out
}

// Enum arguments: the core's vocabularies, refused with the service's message.

type eventKindArg awareness.EventKind

func (k *eventKindArg) UnmarshalJSON(b []byte) error {
	return enumArg(b, "kind", awareness.AllEventKinds, (*awareness.EventKind)(k))
}

type actorTypeArg awareness.ActorType

func (a *actorTypeArg) UnmarshalJSON(b []byte) error {
	return enumArg(b, "actorType", awareness.AllActorTypes, (*awareness.ActorType)(a))
}

type outcomeArg awareness.RunOutcome

func (o *outcomeArg) UnmarshalJSON(b []byte) error {
	return enumArg(b, "outcome", awareness.AllRunOutcomes, (*awareness.RunOutcome)(o))
}

type sessionKindArg awareness.SessionKind

func (k *sessionKindArg) UnmarshalJSON(b []byte) error {
	return enumArg(b, "kinds", awareness.AllSessionKinds, (*awareness.SessionKind)(k))
}

func enumArg[E ~string](b []byte, name string, all []E, out *E) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return awareness.Errorf(awareness.EINVALID, "%s must be a string, not a JSON %s", name, jsonValueKind(b))
	}
	if !slices.Contains(all, E(s)) {
		vals := make([]string, len(all))
		for i, v := range all {
			vals[i] = string(v)
		}
		return awareness.Errorf(awareness.EINVALID, "%s %q is not one of %s", name, truncateArg(s), strings.Join(vals, ", "))
	}
	*out = E(s)
	return nil
}

// jsonValueKind names the JSON type of a value.
func jsonValueKind(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return "value"
	}
	switch b[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	default:
		return "number"
	}
}

// truncateArg shortens a value quoted in a message.
func truncateArg(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	r := []rune(s)
	if len(r) <= max {
		return s
	}
	return string(r[:max]) + "…"
}
