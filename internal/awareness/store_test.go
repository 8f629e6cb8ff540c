package awareness

import (
	"testing"
	"time"
)

func TestNewAppendOpCountsCompactions_REG3(t *testing.T) {
	t.Parallel()
	for _, k := range AllEventKinds {
		ne, err := ValidateRecord(RecordInput{SessionKey: "agent:main:main", Kind: k, ActorType: ActorSystem}, testNow)
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		op := NewAppendOp(ne, testNow)
		want := int64(0)
		if k == Compacted {
			want = 1
		}
		if op.Compactions != want || !op.Now.Equal(testNow) {
			t.Errorf("%s: compactions %d, now %v; want %d, %v", k, op.Compactions, op.Now, want, testNow)
		}
		if err := CheckAppendOps([]*AppendOp{op}); err != nil {
			t.Errorf("%s: CheckAppendOps refused NewAppendOp's op: %v", k, err)
		}
	}
}

func TestCheckAppendOps(t *testing.T) {
	t.Parallel()
	valid := func(k EventKind) *AppendOp {
		ne, err := ValidateRecord(RecordInput{SessionKey: "agent:main:main", Kind: k, ActorType: ActorSystem}, testNow)
		if err != nil {
			t.Fatal(err)
		}
		return NewAppendOp(ne, testNow)
	}
	tests := []struct {
		name string
		mod  func(*AppendOp)
	}{
		{"zero now", func(op *AppendOp) { op.Now = time.Time{} }},
		{"empty session", func(op *AppendOp) { op.New.Event.Session = SessionRef{} }},
		{"unknown kind", func(op *AppendOp) { op.New.Event.Kind = "bogus" }},
		{"unknown actor type", func(op *AppendOp) { op.New.Event.ActorType = "robot" }},
		{"zero occurredAt", func(op *AppendOp) { op.New.Event.OccurredAt = time.Time{} }},
		{"no session kind (not validated)", func(op *AppendOp) { op.New.SessionKind = "" }},
		{"a compaction counted on another kind", func(op *AppendOp) { op.Compactions = 1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			op := valid(GoalChanged)
			tt.mod(op)
			if err := CheckAppendOps([]*AppendOp{valid(GoalChanged), op}); ErrorCode(err) != EINVALID {
				t.Errorf("got %v, want INVALID_ARGUMENT", err)
			}
		})
	}
	uncounted := valid(Compacted)
	uncounted.Compactions = 0 // built by hand, without NewAppendOp
	if err := CheckAppendOps([]*AppendOp{uncounted}); ErrorCode(err) != EINVALID {
		t.Errorf("compacted op without its count: got %v, want INVALID_ARGUMENT", err)
	}
	if err := CheckAppendOps([]*AppendOp{nil}); ErrorCode(err) != EINVALID {
		t.Errorf("nil op: got %v, want INVALID_ARGUMENT", err)
	}
}
