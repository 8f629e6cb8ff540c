package graph_test

import (
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/vektah/gqlparser/v2/ast"

	"github.com/awareness/awareness/graph/generated"
	"github.com/awareness/awareness/graph/resolvers"
)

// requirementIDs matches the requirement ids a description may carry (SIG-1, REC-1..4,
// UPS-*), which a reader without SPEC.md cannot use.
var requirementIDs = regexp.MustCompile(`\b[A-Z]{3}-(\d+(\.\.\d+)?|\*)\b`)

// described reports whether d says something beyond requirement ids: at least two
// words once they are removed.
func described(d string) bool {
	words := 0
	for _, f := range strings.Fields(requirementIDs.ReplaceAllString(d, "")) {
		if strings.IndexFunc(f, unicode.IsLetter) >= 0 {
			words++
		}
	}
	return words >= 2
}

// Every type, field, argument, input field and enum value of the executable schema
// (what GraphiQL's docs panel and a gateway's codegen read) has a description in
// words, not only requirement ids. gqlgen's and GraphQL's built-ins are left out.
func TestSchemaIsDescribed(t *testing.T) {
	schema := generated.NewExecutableSchema(resolvers.NewExecutableSchema(nil)).Schema()
	builtin := map[string]bool{"Int": true, "Float": true, "String": true, "Boolean": true, "ID": true}
	var missing []string
	check := func(where, d string) {
		if !described(d) {
			missing = append(missing, where)
		}
	}
	n := 0
	for name, def := range schema.Types {
		if strings.HasPrefix(name, "__") || builtin[name] || def.BuiltIn {
			continue
		}
		n++
		check(name, def.Description)
		for _, f := range def.Fields {
			if strings.HasPrefix(f.Name, "__") {
				continue
			}
			check(name+"."+f.Name, f.Description)
			for _, a := range f.Arguments {
				check(name+"."+f.Name+"("+a.Name+")", a.Description)
			}
		}
		if def.Kind == ast.Enum {
			for _, v := range def.EnumValues {
				check(name+"."+v.Name, v.Description)
			}
		}
	}
	if n < 20 {
		t.Fatalf("walked %d types; the schema was not loaded", n)
	}
	if len(missing) > 0 {
		t.Errorf("%d schema elements lack a description in words (requirement ids alone do not count):\n  %s",
			len(missing), strings.Join(missing, "\n  "))
	}
}

func TestDescribed(t *testing.T) {
	for d, want := range map[string]bool{
		"": false, "REC-1..4.": false, "REG-3.": false, "UPS-*.": false, "NTC-5, NTC-7.": false,
		"REG-1. A session registry entry.": true, "Pass as changesSince to continue.": true,
	} {
		if got := described(d); got != want {
			t.Errorf("described(%q) = %v, want %v", d, got, want)
		}
	}
}
