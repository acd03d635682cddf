package dataflow

import "sync/atomic"

// Stats are the counters SHOW STREAMS prints for a stream, shared by the
// tasks of every stage that works for it.
type Stats struct {
	In      atomic.Int64 // input records read (the source's, for hops too)
	Out     atomic.Int64 // records written to the output topic
	Late    atomic.Int64 // late rows (and partials) routed or dropped
	Skipped atomic.Int64 // undecodable records skipped
	DLQ     atomic.Int64 // undecodable records dead-lettered
}
