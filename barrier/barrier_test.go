package barrier

import (
	"errors"
	"reflect"
	"testing"
)

func TestRecordsRoundTrip(t *testing.T) {
	st := Step{Flush: "n1-3", Index: 2, Attempt: 1, Close: true, Targets: map[string]map[int32]int64{"ev": {0: 10, 1: 0}}}
	gotStep, gotAck, err := Decode(EncodeStep(st))
	if err != nil || gotAck != nil || !reflect.DeepEqual(*gotStep, st) {
		t.Fatalf("step: %+v %+v %v", gotStep, gotAck, err)
	}
	a := Ack{Flush: "n1-3", Index: 2, Node: "n2", Covered: map[string][]int32{"g": {1, 3}}, Failed: map[string]string{"s": "boom"}, Recovers: []string{"s"}}
	gotStep, gotAck, err = Decode(EncodeAck(a))
	if err != nil || gotStep != nil || !reflect.DeepEqual(*gotAck, a) {
		t.Fatalf("ack: %+v %+v %v", gotStep, gotAck, err)
	}
	if _, _, err := Decode([]byte(`{"v":2,"step":{}}`)); !errors.Is(err, ErrVersion) {
		t.Fatalf("a newer record: %v, want ErrVersion", err)
	}
	if _, _, err := Decode([]byte(`{"v":1}`)); err == nil {
		t.Fatal("a record with neither a step nor an ack decoded")
	}
}

func TestCoverage(t *testing.T) {
	c := NewCoverage(map[string]Stage{
		"hop":   {Partitions: 2, Streams: []string{"a", "b"}},
		"final": {Partitions: 2, Streams: []string{"a"}},
	})
	c.Add(Ack{Node: "n1", Covered: map[string][]int32{"hop": {0}, "final": {1}}})
	if got, want := c.Missing(), []string{"final/0", "hop/1"}; !reflect.DeepEqual(got, want) || c.Settled() {
		t.Fatalf("missing %v (settled %v), want %v", got, c.Settled(), want)
	}
	// Stream a fails on n2 (fenced there: it recovers): final needs nothing more,
	// the hop still serves b.
	c.Add(Ack{Node: "n2", Failed: map[string]string{"a": "fenced"}, Recovers: []string{"a"}})
	if c.Settled() {
		t.Fatal("settled while hop/1 serves a stream nobody reported failed")
	}
	if f := c.Failed()["a"]; f.Msg != "fenced" || !f.Recovers {
		t.Fatalf("failure of a: %+v", f)
	}
	// A plain failure of a elsewhere: it no longer only recovers.
	c.Add(Ack{Node: "n3", Failed: map[string]string{"a": "disk full"}, Covered: map[string][]int32{"hop": {1}}})
	if !c.Settled() {
		t.Fatalf("not settled; missing %v", c.Missing())
	}
	if f := c.Failed()["a"]; f.Recovers {
		t.Fatalf("failure of a still recovering-only: %+v", f)
	}
	// Another process runs final/0 after all: a failed elsewhere, but
	// every partition of it ran, so the step did not fail it.
	c.Add(Ack{Node: "n4", Covered: map[string][]int32{"final": {0}}})
	if f, ok := c.Failed()["a"]; ok || len(c.Missing()) != 0 {
		t.Fatalf("a reported failed (%+v) though all its partitions ran; missing %v", f, c.Missing())
	}
	// A stream with no stage in the step (it could not start) is reported.
	c.Add(Ack{Node: "n1", Failed: map[string]string{"c": "cannot start"}})
	if f, ok := c.Failed()["c"]; !ok || f.Msg != "cannot start" {
		t.Fatalf("failure of c: %+v %v", f, ok)
	}
}

func TestBoardRoutesByFlushAndStep(t *testing.T) {
	var b Board
	in, stop := b.Subscribe("n1-1")
	b.Deliver(Ack{Flush: "n1-1", Index: 0, Node: "x"})
	b.Deliver(Ack{Flush: "n1-2", Index: 1, Node: "other flush"})
	b.Deliver(Ack{Flush: "n1-1", Index: 1, Node: "y"})
	<-in.Ready()
	if got := in.Take(1); len(got) != 1 || got[0].Node != "y" {
		t.Fatalf("step 1: %+v", got)
	}
	if got := in.Take(0); len(got) != 0 {
		t.Fatalf("an earlier step's answer kept after a later one was taken: %+v", got)
	}
	stop()
	b.Deliver(Ack{Flush: "n1-1", Index: 2})
	if got := in.Take(2); len(got) != 0 {
		t.Fatalf("delivered after unsubscribe: %+v", got)
	}
}
