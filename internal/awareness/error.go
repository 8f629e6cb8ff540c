package awareness

import (
	"errors"
	"fmt"
)

// Error codes (ERR-1). They are the only values ever placed in a GraphQL error's
// extensions.code by this service, besides gqlgen's own validation codes.
const (
	EINVALID     = "INVALID_ARGUMENT"
	ENOTFOUND    = "NOT_FOUND"
	ECURSORAHEAD = "CURSOR_AHEAD"
	// EHISTORYGAP: a feed was asked to resume below the session's retained history
	// (FEED-1); extensions.earliestAvailableSequence says where the log starts.
	EHISTORYGAP      = "HISTORY_GAP"
	EUNAUTHENTICATED = "UNAUTHENTICATED"
	EFORBIDDEN       = "FORBIDDEN"
	EUNAVAILABLE     = "UNAVAILABLE"
	EINTERNAL        = "INTERNAL"
	EUNIMPLEMENTED   = "UNIMPLEMENTED"
	// ECOMPLEXITY: the request asks for more work than one request may (ERR-4);
	// gqlgen's own code for its complexity limit.
	ECOMPLEXITY = "COMPLEXITY_LIMIT_EXCEEDED"
	// ERATELIMITED: the caller sent more mutations or subscriptions than its rate
	// allows (ERR-4); retry later.
	ERATELIMITED = "RATE_LIMITED"
	// ESTALEGENERATION: an exact acknowledgement named an earlier generation of its
	// watcher (LIF-2); nothing was acknowledged.
	ESTALEGENERATION = "STALE_GENERATION"
)

// Error is the one error type of the domain. Message is meant for the caller and
// must never contain SQL, file paths or DSNs; internal causes travel in Err and are
// logged, never shown.
type Error struct {
	Code    string
	Message string
	Err     error
	// Details are further fields of the GraphQL error's extensions, beside code (e.g.
	// earliestAvailableSequence of HISTORY_GAP); nil for most errors.
	Details map[string]any
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("awareness error: code=%s message=%s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("awareness error: code=%s message=%s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with the given code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Internal wraps an unexpected failure. The caller sees only a generic message.
func Internal(err error) *Error {
	return &Error{Code: EINTERNAL, Message: "internal error", Err: err}
}

// Unavailable wraps a storage failure the caller may retry (disk full, database down).
func Unavailable(err error) *Error {
	return &Error{Code: EUNAVAILABLE, Message: "the state database is unavailable; retry later", Err: err}
}

// ErrorCode returns the code of err, EINTERNAL for errors that are not *Error, and ""
// for nil.
func ErrorCode(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EINTERNAL
}

// ErrorMessage returns the caller-facing message of err.
func ErrorMessage(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "internal error"
}
