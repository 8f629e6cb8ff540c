// Package jsontext holds the one text check every transport applies to request text
// before it is decoded (ERR-3): valid UTF-8, and no string escape that decodes to a
// lone UTF-16 surrogate, in the request's JSON (Valid) and in the string literals of
// its GraphQL document (ValidDocument). encoding/json and the GraphQL parser would
// silently turn either into U+FFFD, altering a session key instead of rejecting it
// (KEY-4, ERR-2).
package jsontext

import (
	"unicode/utf16"
	"unicode/utf8"
)

// Message is the refusal every transport gives for text that is not Valid.
const Message = "request text is not valid UTF-8 or escapes a lone UTF-16 surrogate"

// Valid reports whether b is valid UTF-8 whose JSON string escapes never
// decode to a lone UTF-16 surrogate. It does not check JSON syntax: malformed JSON is
// left to the decoder.
func Valid(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !inString {
			inString = c == '"'
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			var ok bool
			if i, ok = escape(b, i); !ok {
				return false
			}
		}
	}
	return true
}

// ValidDocument reports whether doc, a GraphQL document, is valid UTF-8 whose string
// literals never escape a lone UTF-16 surrogate (graphql-js refuses one; gqlparser
// would decode it to U+FFFD). Block strings, whose backslashes are text but for
// \""", and comments are skipped; the rest of the syntax is the parser's.
func ValidDocument(doc string) bool {
	if !utf8.ValidString(doc) {
		return false
	}
	for i := 0; i < len(doc); i++ {
		switch doc[i] {
		case '#':
			for i < len(doc) && doc[i] != '\n' && doc[i] != '\r' {
				i++
			}
		case '"':
			if len(doc) >= i+3 && doc[i+1] == '"' && doc[i+2] == '"' {
				i = blockStringEnd(doc, i+3)
				continue
			}
			for i++; i < len(doc) && doc[i] != '"' && doc[i] != '\n' && doc[i] != '\r'; i++ {
				if doc[i] == '\\' {
					var ok bool
					if i, ok = escape(doc, i); !ok {
						return false
					}
				}
			}
		}
	}
	return true
}

// blockStringEnd returns the index of the last quote closing the block string whose
// text starts at i (len(doc) when it is not closed): the last three of the first run
// of three or more quotes not escaped as \""".
func blockStringEnd(doc string, i int) int {
	for i < len(doc) {
		switch {
		case doc[i] == '\\' && len(doc) >= i+4 && doc[i+1:i+4] == `"""`:
			i += 4
		case doc[i] == '"':
			q := i
			for q < len(doc) && doc[q] == '"' {
				q++
			}
			if q-i >= 3 {
				return q - 1
			}
			i = q
		default:
			i++
		}
	}
	return len(doc)
}

// escape checks the escape whose backslash is at b[i], inside a string, and returns
// the index of its last byte: a \uXXXX surrogate must pair with a following
// \uXXXX one (ok false otherwise); any other escape, malformed ones included (the
// decoder refuses those), is two bytes.
func escape[T ~string | ~[]byte](b T, i int) (last int, ok bool) {
	if i+1 >= len(b) || b[i+1] != 'u' {
		return i + 1, true // \" \\ \/ \b \f \n \r \t
	}
	r, isHex := hex4(b, i+2)
	if !isHex {
		return i + 1, true
	}
	i += 5
	if !utf16.IsSurrogate(r) {
		return i, true
	}
	if r >= 0xDC00 {
		return i, false // a low surrogate with no high one before it
	}
	if i+2 < len(b) && b[i+1] == '\\' && b[i+2] == 'u' {
		if r2, isHex := hex4(b, i+3); isHex && r2 >= 0xDC00 && r2 <= 0xDFFF {
			return i + 6, true
		}
	}
	return i, false // a high surrogate not followed by a low one
}

func hex4[T ~string | ~[]byte](b T, at int) (rune, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	var r rune
	for k := at; k < at+4; k++ {
		switch c := b[k]; {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
