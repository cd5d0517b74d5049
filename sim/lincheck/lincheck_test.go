package lincheck

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

func op(client int, call, ret int64, in Input, out Output) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Call: call, Return: ret, Input: in, Output: out}
}

// The model accepts what a linearizable ledger can answer and refuses
// what it cannot: a stale read after a write returned, a counter read
// going back, a lost write's value read only after its call.
func TestModel(t *testing.T) {
	set := func(k, v string) Input { return Input{Write: true, Key: k, Value: v} }
	get := func(k string) Input { return Input{Key: k} }
	ok := Output{}
	lost := Output{Unknown: true}
	val := func(v string) Output { return Output{Value: v} }
	const never = 1 << 62
	for _, tc := range []struct {
		name string
		ops  []porcupine.Operation
		want bool
	}{
		{"read after write", []porcupine.Operation{op(0, 0, 1, set("b", "1"), ok), op(1, 2, 3, get("b"), val("1"))}, true},
		{"stale read after write", []porcupine.Operation{op(0, 0, 1, set("b", "1"), ok), op(0, 2, 3, set("b", "2"), ok),
			op(1, 4, 5, get("b"), val("1"))}, false},
		{"concurrent read sees either", []porcupine.Operation{op(0, 0, 1, set("b", "1"), ok), op(0, 2, 6, set("b", "2"), ok),
			op(1, 3, 4, get("b"), val("1")), op(1, 5, 7, get("b"), val("2"))}, true},
		{"lost write may have happened", []porcupine.Operation{op(0, 0, 1, set("b", "1"), ok), op(0, 2, never, set("b", "2"), lost),
			op(1, 5, 6, get("b"), val("2")), op(1, 7, 8, get("b"), val("2"))}, true},
		{"lost write may not have", []porcupine.Operation{op(0, 0, 1, set("b", "1"), ok), op(0, 2, never, set("b", "2"), lost),
			op(1, 5, 6, get("b"), val("1"))}, true},
		{"lost write not before its call", []porcupine.Operation{op(0, 0, 1, set("b", "1"), ok), op(1, 2, 3, get("b"), val("2")),
			op(0, 4, never, set("b", "2"), lost)}, false},
		{"counter grows", []porcupine.Operation{op(0, 0, 1, get("settled:a"), val("0.5")), op(1, 2, 3, get("settled:a"), val("0.7"))}, true},
		{"counter goes back", []porcupine.Operation{op(0, 0, 1, get("settled:a"), val("0.7")), op(1, 2, 3, get("settled:a"), val("0.5"))}, false},
		{"counter reads concurrent", []porcupine.Operation{op(0, 0, 5, get("settled:a"), val("0.7")), op(1, 1, 3, get("settled:a"), val("0.5"))}, true},
		{"keys independent", []porcupine.Operation{op(0, 0, 1, set("a", "1"), ok), op(0, 2, 3, set("b", "9"), ok),
			op(1, 4, 5, get("a"), val("1")), op(1, 6, 7, get("b"), val("9"))}, true},
	} {
		if got := porcupine.CheckOperations(Model, tc.ops); got != tc.want {
			t.Errorf("%s: linearizable %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A History records what was called and answered, and a lost write as
// pending forever.
func TestHistory(t *testing.T) {
	h := NewHistory()
	h.Call(0, Input{Write: true, Key: "b", Value: "1"}).Return(Output{})
	h.Call(1, Input{Write: true, Key: "b", Value: "2"}).Lost()
	h.Call(0, Input{Key: "b"}).Return(Output{Value: "1"})
	if err := h.Check(time.Second, ""); err != nil {
		t.Fatal(err)
	}
	h.Call(0, Input{Key: "b"}).Return(Output{Value: "3"})
	if err := h.Check(time.Second, t.TempDir()); err == nil {
		t.Fatal("a read of a value never written passed")
	}
}
