// Package vocabtest gives the payload round-trip tests of every codec their cases, by
// reflection over awareness.Payload: a field added to the struct is covered by every
// codec's test without editing any of them, so a codec that drops it fails.
package vocabtest

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/awareness/awareness/internal/awareness"
)

// Field is one field of awareness.Payload.
type Field struct {
	// Name is the Go field name; the input structs (awareness.RecordInput, the GraphQL
	// RecordEventInput, client.Event) spell it the same way.
	Name string
	// JSON is the field's key in the payload JSON object and its GraphQL input name.
	JSON string
	// Sample is a valid, non-zero value of the field's type.
	Sample reflect.Value
}

// Case is one payload and the JSON object every codec must write for it.
type Case struct {
	Name    string
	Payload awareness.Payload
	// JSON is the payload's JSON object as encoding/json decodes it into any (numbers
	// are float64).
	JSON map[string]any
	// Kind is an event kind that accepts the payload.
	Kind awareness.EventKind
}

// samples holds a valid, non-zero value for each field type.
var samples = map[reflect.Type]any{
	reflect.TypeFor[awareness.RunOutcome](): awareness.OutcomeTimeout,
	reflect.TypeFor[string]():               "sample",
	reflect.TypeFor[int]():                  3,
}

// Fields returns the fields of awareness.Payload; it fails tb when a field has no JSON
// key or a type without a sample value here.
func Fields(tb testing.TB) []Field {
	tb.Helper()
	t := reflect.TypeFor[awareness.Payload]()
	var fs []Field
	for i := range t.NumField() {
		f := t.Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if key == "" || key == "-" {
			tb.Fatalf("awareness.Payload.%s has no JSON key", f.Name)
		}
		s, ok := samples[f.Type]
		if !ok {
			tb.Fatalf("awareness.Payload.%s is a %s: add a sample value of that type to vocabtest", f.Name, f.Type)
		}
		v := reflect.ValueOf(s)
		if f.Type.Kind() == reflect.String && f.Type != reflect.TypeFor[awareness.RunOutcome]() {
			v = reflect.ValueOf(strings.ToLower(f.Name) + "-" + s.(string)).Convert(f.Type)
		}
		fs = append(fs, Field{Name: f.Name, JSON: key, Sample: v})
	}
	return fs
}

// Cases returns one payload per field with only that field set, then one with every
// field set.
func Cases(tb testing.TB) []Case {
	tb.Helper()
	fs := Fields(tb)
	var cases []Case
	all := Case{Name: "every field", JSON: map[string]any{}, Kind: awareness.RunFailed}
	for _, f := range fs {
		c := Case{Name: f.Name, JSON: map[string]any{}, Kind: awareness.GoalChanged}
		for _, p := range []*Case{&c, &all} {
			reflect.ValueOf(&p.Payload).Elem().FieldByName(f.Name).Set(f.Sample)
			p.JSON[f.JSON] = jsonValue(f.Sample)
		}
		if c.Payload.Outcome != "" {
			c.Kind = awareness.RunFailed
		}
		cases = append(cases, c)
	}
	if !all.Kind.TakesOutcome() {
		tb.Fatalf("%s takes no outcome", all.Kind)
	}
	return append(cases, all)
}

// jsonValue is v as encoding/json decodes it into any.
func jsonValue(v reflect.Value) any {
	switch {
	case v.CanInt():
		return float64(v.Int())
	case v.Kind() == reflect.String:
		return v.String()
	}
	panic(fmt.Sprintf("vocabtest: no JSON form for %s", v.Type()))
}

// SetInput sets, for every field of p that is set, the field of the same name of the
// input struct *in (a pointer field, as the inputs spell optional values) to it, and
// fails tb when in has no such field.
func SetInput(tb testing.TB, in any, p awareness.Payload) {
	tb.Helper()
	dst := reflect.ValueOf(in).Elem()
	src := reflect.ValueOf(p)
	for _, f := range Fields(tb) {
		v := src.FieldByName(f.Name)
		if v.IsZero() {
			continue
		}
		d := dst.FieldByName(f.Name)
		if !d.IsValid() {
			tb.Fatalf("%s has no field %s for the payload field", dst.Type(), f.Name)
		}
		switch {
		case d.Kind() == reflect.Pointer && v.Type().ConvertibleTo(d.Type().Elem()):
			ptr := reflect.New(d.Type().Elem())
			ptr.Elem().Set(v.Convert(d.Type().Elem()))
			d.Set(ptr)
		case v.Type().ConvertibleTo(d.Type()):
			d.Set(v.Convert(d.Type()))
		default:
			tb.Fatalf("%s.%s is a %s, which cannot hold the payload's %s", dst.Type(), f.Name, d.Type(), v.Type())
		}
	}
}
