// Package optest is a harness for testing dataflow operators, alone or as
// a stage's chain, through the runtime's own task loop: the events a
// task waits for (a fetch, a tick, a commit, a FLUSH) are scripted by the
// test and handled, one at a time on its goroutine, by the same code a
// server runs (dataflow.Driver). RisingWave's executor tests, a mock
// source pushing chunks and barriers into one executor, are the model.
//
// A Harness is one process running one stage:
//
//   - its state store is a real Pebble over an in-memory file system
//     (vfs.NewCrashableMem), so a Crash keeps exactly what was synced, and
//     LoseDisk moves the next start to an empty disk, restored from the
//     changelog;
//   - its Kafka is an in-memory double of the runtime's Kafka interfaces
//     (Kafka): the producer operators write through, the input the task
//     reads, the transactional producer of the changelog and of an
//     exactly-once stage's commits, consumer-group offsets. Harnesses can
//     share one, so a hop's or a combine's output is the next stage's
//     input;
//   - its clock moves only when the test says.
//
// A test builds rows from the input's schema with a compact literal syntax
// (ParseRow: "a,x,1,5" is ('a', 'x', 1, 00:00:05) over TEXT, TEXT, BIGINT,
// TIMESTAMP), pushes them to a partition's task at given offsets (Push),
// moves the watermark (Advance, or the event time with Idle and Flush),
// commits, crashes and restarts, and reads what became visible (Take:
// records, decoded as rows, panes, a hop's markers or a combine's
// partials, dead letters and late rows by topic), the batches the chain handed on (Batches), the task's counters
// (Counts) and the metrics (Metrics).
//
// The harness knows nothing of SQL: a test builds its operators itself
// (or plans them from SQL in its own test files).
package optest
