package awareness

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestVocabularyTablesHoldEveryConstant: a constant of a vocabulary type declared
// anywhere in the package has its row in the vocabulary's table, so that a value
// cannot be added to the code and forgotten by validation (SIG-1, SIG-2, KEY-2).
// graph's TestVocabulariesMatchTheSchema ties the tables to the GraphQL enums.
func TestVocabularyTablesHoldEveryConstant(t *testing.T) {
	t.Parallel()
	tables := map[string][]string{
		"EventKind":   strs(AllEventKinds),
		"ActorType":   strs(AllActorTypes),
		"RunOutcome":  strs(AllRunOutcomes),
		"SessionKind": strs(AllSessionKinds),
	}
	declared := declaredConstants(t, tables)
	for typ, table := range tables {
		if len(declared[typ]) == 0 {
			t.Errorf("found no constant of type %s", typ)
		}
		for _, v := range declared[typ] {
			if !slices.Contains(table, v) {
				t.Errorf("%s constant %q has no row in its table", typ, v)
			}
		}
		for i, v := range table {
			if slices.Index(table, v) != i {
				t.Errorf("%s %q has two rows", typ, v)
			}
		}
	}
	for _, r := range eventKinds {
		if r.summary == nil {
			t.Errorf("event kind %s has no canonical summary", r.kind)
		}
	}
}

func TestKindRoles_SIG1_NTC4_WAT2(t *testing.T) {
	t.Parallel()
	for _, k := range AllEventKinds {
		n, s, c, r := k.Notifies(), k.SeedsWatchers(), k.TouchesCursors(), k.StartsIncarnation()
		if n && s || n && r || s && r || c != (n || s || r) {
			t.Errorf("%s: Notifies %v, SeedsWatchers %v, StartsIncarnation %v, TouchesCursors %v", k, n, s, r, c)
		}
	}
	for k, want := range map[EventKind]bool{ChildSpawned: true, HumanDirectMessage: false, RunCompleted: false} {
		if got := k.SeedsWatchers(); got != want {
			t.Errorf("%s.SeedsWatchers() = %v, want %v", k, got, want)
		}
	}
	for _, k := range AllEventKinds {
		if got, want := k.CountsCompaction(), k == Compacted; got != want {
			t.Errorf("%s.CountsCompaction() = %v, want %v", k, got, want)
		}
		if got, want := k.TakesOutcome(), k == RunFailed; got != want {
			t.Errorf("%s.TakesOutcome() = %v, want %v", k, got, want)
		}
	}
	if k := EventKind("bogus"); k.TouchesCursors() || k.Notifies() || k.CountsCompaction() || k.TakesOutcome() {
		t.Errorf("an unknown kind has a role")
	}
}

func TestOneOf(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   []string
		want string
	}{{nil, ""}, {[]string{"a"}, "a"}, {[]string{"a", "b"}, "a or b"}, {[]string{"a", "b", "c"}, "a, b or c"}} {
		if got := oneOf(tt.in); got != tt.want {
			t.Errorf("oneOf(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func strs[V ~string](vs []V) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}

// declaredConstants returns the values of the package's string constants of the given
// types, by type name.
func declaredConstants(t *testing.T, types map[string][]string) map[string][]string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				id, ok := vs.Type.(*ast.Ident)
				if !ok {
					continue
				}
				if _, ok := types[id.Name]; !ok {
					continue
				}
				for _, v := range vs.Values {
					lit, ok := v.(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Fatalf("%s: a %s constant that is not a string literal", fset.Position(v.Pos()), id.Name)
					}
					out[id.Name] = append(out[id.Name], strings.Trim(lit.Value, "`\""))
				}
			}
		}
	}
	return out
}
