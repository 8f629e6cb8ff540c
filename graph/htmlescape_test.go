package graph

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzNeedsHTMLEscape holds needsHTMLEscape, which lets a response's data through
// unescaped, to json.HTMLEscape: it is true exactly when the escaping changes the text.
func FuzzNeedsHTMLEscape(f *testing.F) {
	for _, s := range []string{"", `{"a":1}`, "<", ">", "&", "\u2028", "\u2029", "\u2027", "\xe2\x80",
		"\xe2\x80\xa8x", `{"s":"caf\u00e9 \u2014 ok"}`, "x\xe2\xe2\x80\xa9", "\xe2"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var esc bytes.Buffer
		json.HTMLEscape(&esc, b)
		if want := !bytes.Equal(esc.Bytes(), b); needsHTMLEscape(b) != want {
			t.Fatalf("needsHTMLEscape(%q) = %v, but the escaping changes it: %v", b, !want, want)
		}
		if got := appendData([]byte("p"), b); !bytes.Equal(got, append([]byte("p"), esc.Bytes()...)) {
			t.Fatalf("appendData(%q) = %q, want %q", b, got[1:], esc.Bytes())
		}
	})
}
