package jsontext

import "testing"

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
