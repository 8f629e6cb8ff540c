package resolvers

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/awareness/awareness/internal/awareness"
)

func TestERR1ErrorPresenter(t *testing.T) {
	secret := errors.New(`SELECT * FROM events WHERE path = "/var/lib/awareness.db"`)
	validation := &gqlerror.Error{Message: "Cannot query field", Extensions: map[string]any{"code": "GRAPHQL_VALIDATION_FAILED"}}
	tests := []struct {
		name     string
		err      error
		wantMsg  string
		wantCode string
		wantLogs int
	}{
		{"INTERNAL hides its message and logs the cause", awareness.Internal(secret), "internal error", awareness.EINTERNAL, 1},
		{"INTERNAL with a custom message still hides it", &awareness.Error{Code: awareness.EINTERNAL, Message: "disk at /var is full"}, "internal error", awareness.EINTERNAL, 1},
		{"UNAVAILABLE keeps its generic message and logs the cause", awareness.Unavailable(secret), "the state database is unavailable; retry later", awareness.EUNAVAILABLE, 1},
		{"INVALID_ARGUMENT is shown, not logged", awareness.Errorf(awareness.EINVALID, "limit must be between 1 and 200, got 0"), "limit must be between 1 and 200, got 0", awareness.EINVALID, 0},
		{"CURSOR_AHEAD", awareness.Errorf(awareness.ECURSORAHEAD, "ahead"), "ahead", awareness.ECURSORAHEAD, 0},
		{"wrapped by gqlgen on an argument path", gqlerror.WrapPath(nil, awareness.Errorf(awareness.EINVALID, "bad time")), "bad time", awareness.EINVALID, 0},
		{"gqlgen's own code is kept", validation, "Cannot query field", "GRAPHQL_VALIDATION_FAILED", 0},
		{"unknown error is INTERNAL", secret, "internal error", awareness.EINTERNAL, 1},
		{"gqlgen request error without a field", &gqlerror.Error{Message: "json request body could not be decoded"}, "json request body could not be decoded", awareness.EINVALID, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			present := ErrorPresenter(slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
			got := present(context.Background(), tt.err)
			if got.Message != tt.wantMsg {
				t.Errorf("message = %q, want %q", got.Message, tt.wantMsg)
			}
			if diff := cmp.Diff(map[string]any{"code": tt.wantCode}, got.Extensions); diff != "" {
				t.Errorf("extensions (-want +got):\n%s", diff)
			}
			if n := strings.Count(logs.String(), "\n"); n != tt.wantLogs {
				t.Errorf("logged %d records, want %d:\n%s", n, tt.wantLogs, logs.String())
			}
			if tt.wantLogs > 0 && errors.Is(tt.err, secret) && !strings.Contains(logs.String(), "SELECT") {
				t.Errorf("the cause is not in the log: %s", logs.String())
			}
		})
	}
}

func TestERR1RecoverFuncIsInternal(t *testing.T) {
	var logs bytes.Buffer
	present := ErrorPresenter(slog.New(slog.NewJSONHandler(&logs, nil)))
	err := RecoverFunc()(context.Background(), "boom")
	got := present(context.Background(), err)
	if got.Message != "internal error" || got.Extensions["code"] != awareness.EINTERNAL {
		t.Errorf("presented panic = %q %v, want internal error INTERNAL", got.Message, got.Extensions)
	}
	if !strings.Contains(logs.String(), "panic: boom") {
		t.Errorf("the panic is not logged: %s", logs.String())
	}
}
