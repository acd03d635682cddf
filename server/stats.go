package server

import (
	"context"
	"time"

	"github.com/turbinesql/turbinesql/dataflow"
	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/planner"
	"github.com/turbinesql/turbinesql/window"
)

// sampleRecords is how many of the last records of each source partition
// the cost rule samples.
const sampleRecords = 2000

// recordOverhead approximates what Kafka adds to each record on the wire
// (batch framing, varints, timestamp and offset deltas), so that many small
// records are not counted as cheaper than they are.
const recordOverhead = 20

// estimate runs both hops of p over a sample of its source, the last
// records of each partition, and measures what each would ship: the
// repartition hop one record per decodable row (its original bytes, keyed
// by the column), the combine hop one partial per (window, group key) per
// source partition. Nothing is written.
func (s *Server) estimate(p *planner.Plan) (*planner.Estimate, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	byPart := map[int32][]*kafkaio.Record{}
	if err := s.kafka.ReadTail(ctx, p.Input.Topic, p.Input.From, sampleRecords, func(r *kafkaio.Record) error {
		byPart[r.Partition] = append(byPart[r.Partition], r)
		return nil
	}); err != nil {
		return nil, err
	}
	e := &planner.Estimate{Partitions: len(byPart)}
	// A source whose statistics are still empty (nothing read it since it
	// was declared, on an empty topic) takes this sample as its first.
	st := s.statsFor(p.Input.Source)
	seed := st.empty()
	dec := dataflow.NewDecoder(p.Input)
	colIdx := p.Input.Schema.Index(p.RepartitionBy)
	size := p.Window.Spec.Size
	var minT, maxT int64
	hasT := false
	allWindows := map[int64]bool{}
	for _, recs := range byPart {
		values := make([][]byte, len(recs))
		for i, r := range recs {
			values[i] = r.Value
		}
		rec, decoded, _ := dec.Decode(values)
		b := exec.BatchOf(rec, p.Input.Schema)
		dataflow.FillKafkaTime(p.Input, b, recs, decoded)
		if seed {
			st.observe(b)
		}
		if p.NeedsSeq {
			dataflow.AppendSeq(b, recs, decoded)
		}
		col := b.Cols[colIdx]
		for i, idx := range decoded[:b.N] {
			key := exec.PartitionKeyText(col, i, nil)
			e.RepartitionRecords++
			e.RepartitionBytes += int64(len(recs[idx].Value) + len(key) + recordOverhead)
		}
		e.SampleRows += int64(b.N)
		ts := b.Cols[p.Window.TimeIdx]
		windows := map[int64]bool{}
		for i := 0; i < b.N; i++ {
			if ts.IsNull(i) {
				continue
			}
			t := ts.I[i]
			windows[window.FloorTo(t, size)] = true
			allWindows[window.FloorTo(t, size)] = true
			if !hasT || t < minT {
				minT = t
			}
			if !hasT || t > maxT {
				maxT = t
			}
			hasT = true
		}
		e.Windows += int64(len(windows))
		a, err := planner.NewAggregator(p, 0)
		if err != nil {
			rec.Release()
			return nil, err
		}
		if _, err := a.Consume(b, 0, false); err != nil {
			rec.Release()
			return nil, err
		}
		rec.Release()
		for _, part := range a.ShipDue(0, true) {
			e.CombineRecords++
			e.CombineBytes += int64(len(part.Key) + 8 + len(part.Enc) + recordOverhead)
		}
	}
	if e.Windows > 0 {
		e.KeysPerWindowPartition = float64(e.CombineRecords) / float64(e.Windows)
		e.RowsPerWindow = float64(e.SampleRows) / float64(len(allWindows))
	}
	if hasT && maxT > minT {
		e.EventsPerSecond = float64(e.SampleRows) / (float64(maxT-minT) / 1000)
	}
	return e, nil
}
