// Package jsontext holds the one text check every transport applies to request JSON
// before it is decoded (ERR-3): valid UTF-8, and no string escape that decodes to a
// lone UTF-16 surrogate. encoding/json would silently turn either into U+FFFD,
// altering a session key instead of rejecting it (KEY-4, ERR-2).
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
			if i+1 < len(b) && b[i+1] != 'u' {
				i++ // \" \\ \/ \b \f \n \r \t
				continue
			}
			r, ok := hex4(b, i+2)
			if !ok {
				continue // malformed escape: the decoder rejects it
			}
			i += 5
			if !utf16.IsSurrogate(r) {
				continue
			}
			if r >= 0xDC00 {
				return false // a low surrogate with no high one before it
			}
			if i+2 < len(b) && b[i+1] == '\\' && b[i+2] == 'u' {
				if r2, ok := hex4(b, i+3); ok && r2 >= 0xDC00 && r2 <= 0xDFFF {
					i += 6
					continue
				}
			}
			return false // a high surrogate not followed by a low one
		}
	}
	return true
}

func hex4(b []byte, at int) (rune, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[at : at+4] {
		switch {
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
