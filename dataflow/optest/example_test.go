package optest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/turbinesql/turbinesql/dataflow"
	"github.com/turbinesql/turbinesql/dataflow/optest"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/types"
)

// counter is an operator of the example: it counts its input's records by
// Kafka key, writes each count that changed to topic "counts" when the
// watermark reaches it, and keeps the counts in its task's state.
type counter struct {
	env     *dataflow.Env
	n       map[string]int64
	changed map[string]bool
}

var _ dataflow.Op = (*counter)(nil)

// countsKey names the counts in the task's state.
const countsKey = "counts"

func (c *counter) Open(_ context.Context, env *dataflow.Env) error {
	c.env, c.n, c.changed = env, map[string]int64{}, map[string]bool{}
	v, err := env.Store.TaskValue(env.State, env.Partition, countsKey)
	if err != nil || v == nil {
		return err
	}
	return json.Unmarshal(v, &c.n)
}

func (c *counter) Process(_ context.Context, b *dataflow.Batch) (*dataflow.Batch, error) {
	for _, r := range b.Recs {
		c.n[string(r.Key)]++
		c.changed[string(r.Key)] = true
	}
	return nil, nil
}

func (c *counter) OnWatermark(ctx context.Context, wm dataflow.Watermark) (*dataflow.Batch, error) {
	if !wm.Has {
		return nil, nil
	}
	keys := make([]string, 0, len(c.changed))
	for k := range c.changed {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		c.env.Out.Produce(ctx, &kafkaio.Record{Topic: "counts", Partition: c.env.Partition, Key: []byte(k),
			Value: strconv.AppendInt(nil, c.n[k], 10)})
	}
	clear(c.changed)
	return nil, nil
}

func (c *counter) Commit(_ context.Context, cm *dataflow.Commit) error {
	v, err := json.Marshal(c.n)
	if err != nil {
		return err
	}
	return cm.State.PutTaskValue(c.env.Partition, countsKey, v)
}

func (c *counter) Close() {}

// exampleT is what an Example, which has no testing.T, gives the harness.
type exampleT struct{ cleanups []func() }

func (*exampleT) Helper()                        {}
func (*exampleT) Fatal(args ...any)              { panic(fmt.Sprint(args...)) }
func (*exampleT) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
func (*exampleT) Errorf(format string, a ...any) { fmt.Printf(format+"\n", a...) }
func (e *exampleT) Cleanup(f func())             { e.cleanups = append(e.cleanups, f) }
func (e *exampleT) done() {
	for _, f := range slices.Backward(e.cleanups) {
		f()
	}
}

// show prints what a task made visible.
func show(o optest.Output) {
	for _, r := range o {
		fmt.Printf("  %s %s=%s\n", r.Topic, r.Key, r.Value)
	}
}

// A task counting records by key: rows pushed, a watermark, a commit; a
// crash loses what no commit wrote, and the task reads it again.
func Example() {
	t := &exampleT{}
	defer t.done()
	h := optest.New(t, optest.Config{
		Input: optest.Format{Key: "user", Schema: types.Schema{
			{Name: "user", Type: types.Text}, {Name: "amount", Type: types.Int}, {Name: "ts", Type: types.Timestamp}}},
		Ops:        func(int32) []dataflow.Op { return []dataflow.Op{&counter{}} },
		Watermarks: optest.Scripted,
	})
	task := h.Task(0)
	task.Push(0, "alice,10,1", "bob,5,2", "alice,7,3")
	task.Advance(3_000) // the watermark reaches the operator at this commit
	fmt.Println("after the first commit:")
	show(task.Take())

	task.Push(3, "bob,1,4")
	h.Crash() // offset 3 was read, never committed
	task.Poll()
	task.Advance(4_000)
	fmt.Println("after the crash, offset 3 read again:")
	show(task.Take())
	fmt.Println("committed up to offset", task.Committed().Offset)
	// Output:
	// after the first commit:
	//   counts alice=2
	//   counts bob=1
	// after the crash, offset 3 read again:
	//   counts bob=2
	// committed up to offset 4
}
