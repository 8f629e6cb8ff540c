package jsontext

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/lexer"
)

func TestValid(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{`{"k":"agent:main:main"}`, true},
		{`{"k":"\u00e9\ud83d\ude00\n\"\\u\\ud800"}`, true}, // escaped backslash: \\ud800 is not an escape
		{`{"k":"a\ud800"}`, false},
		{`{"k":"a\ud800\u0041"}`, false},
		{`{"k":"a\udc00"}`, false},
		{`{"k":"a\uD83D\uDE00"}`, true},
		{`{"k":"a\uD83D"}`, false},
		{"{\"k\":\"\xff\"}", false},
		{`{"k":"\u12"}`, true}, // malformed: left to the JSON decoder
		{`\ud800`, true},       // outside a string: left to the JSON decoder
	}
	for _, tt := range tests {
		if got := Valid([]byte(tt.in)); got != tt.want {
			t.Errorf("Valid(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestValidDocument(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{`{ s(k: "agent:main:main") }`, true},
		{`{ s(k: "a\ud800") }`, false},
		{`{ s(k: "a\udc00b") }`, false},
		{`{ s(k: "a\uD83D\uDE00") }`, true},
		{`{ s(k: "a\uD83D\u0041") }`, false},
		{`{ s(k: "a\\ud800") }`, true},    // an escaped backslash, then text
		{`{ s(k: "a\"\ud800") }`, false},  // an escaped quote does not end the string
		{`{ s(k: "\u{1F600}") }`, true},   // braced: the parser checks the scalar value
		{`{ s(k: "\u12") }`, true},        // malformed: the parser refuses it
		{`{ s(k: """a\ud800""") }`, true}, // a block string's backslash is text
		{`{ s(k: """a\""" "\ud800" """) }`, true},
		{`{ s(k: """a""" t: "\ud800") }`, false},
		{`{ s(k: """a"""" t: "\ud800") }`, false}, // four quotes: the last three close
		{"{ s # \"\\ud800\n }", true},             // a comment
		{"{ s(k: \"a\n\\ud800\") }", true},        // a string ends at the line: the parser refuses it
		{"{ s(k: \"\xff\") }", false},
		{`{ s(k: "\ud800`, false},
	}
	for _, tt := range tests {
		if got := ValidDocument(tt.in); got != tt.want {
			t.Errorf("ValidDocument(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// FuzzValidDocument holds ValidDocument to gqlparser's lexer: for a document the
// lexer reads that spells no U+FFFD itself, ValidDocument refuses exactly the
// documents with a string or block string value the lexer decoded to U+FFFD.
func FuzzValidDocument(f *testing.F) {
	for _, s := range []string{`{ s(k: "a\ud800") }`, `{ s(k: """\ud800""") }`, `{ s(k: "\uD83D\uDE00") }`,
		"{ s # \"\\ud800\n }", `{ s(k: "a\"\udc00") }`, `{ s(k: """x\"""" y: "\ud83d") }`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		if !utf8.ValidString(doc) || strings.ContainsRune(doc, utf8.RuneError) || strings.Contains(strings.ToLower(doc), "fffd") {
			return
		}
		lex := lexer.New(&ast.Source{Input: doc})
		replaced := false
		for {
			tok, err := lex.ReadToken()
			if err != nil {
				return // the parser refuses the document anyway
			}
			if tok.Kind == lexer.EOF {
				break
			}
			if (tok.Kind == lexer.String || tok.Kind == lexer.BlockString) && strings.ContainsRune(tok.Value, utf8.RuneError) {
				replaced = true
			}
		}
		if got := ValidDocument(doc); got == replaced {
			t.Errorf("ValidDocument(%q) = %v, but the lexer replaced a surrogate: %v", doc, got, replaced)
		}
	})
}
