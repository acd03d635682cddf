package server

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/types"
)

// handleLate accounts for rows every window of which had closed: with a
// late_data_topic they are written there as they came in (key, bytes,
// broker timestamp), with headers naming the stream, the windows and where
// the record came from; otherwise they are dropped. Either way they are
// counted, so nothing late disappears silently. late are row indices of b,
// whose row i came from recs[decoded[i]].
func (r *runner) handleLate(ctx context.Context, recs []*kgo.Record, decoded, late []int, b *exec.Batch) error {
	topic := r.def.Options.LateDataTopic
	action := "dropped"
	if topic != "" {
		action = "routed"
		out := make([]*kgo.Record, len(late))
		n := int32(r.srv.dlqPartitions(ctx, topic))
		for i, row := range late {
			src := recs[decoded[row]]
			out[i] = &kgo.Record{
				Topic: topic, Key: src.Key, Value: src.Value, Timestamp: src.Timestamp, Partition: src.Partition % n,
				Headers: []kgo.RecordHeader{
					{Key: "turbine.stream", Value: []byte(r.def.Name)},
					{Key: "turbine.window", Value: []byte(r.lateWindows(b, row))},
					{Key: "turbine.watermark", Value: []byte(exec.FormatTimestamp(types.MillisTime(r.wm)))},
					{Key: "turbine.source.topic", Value: []byte(src.Topic)},
					{Key: "turbine.source.partition", Value: []byte(strconv.Itoa(int(src.Partition)))},
					{Key: "turbine.source.offset", Value: []byte(strconv.FormatInt(src.Offset, 10))},
				},
			}
		}
		if err := r.srv.kafka.produceSync(ctx, out); err != nil {
			return fmt.Errorf("write late rows to %s: %w", topic, err)
		}
	}
	r.srv.metrics.lateRows.WithLabelValues(r.def.Name, action).Add(float64(len(late)))
	r.addStats(func(s *streamStats) { s.late += int64(len(late)) })
	return nil
}

// lateWindows names the windows a late row fell in, "start/end" each,
// comma-separated; "none (NULL event time)" when it had no event time.
func (r *runner) lateWindows(b *exec.Batch, row int) string {
	ts := b.Cols[r.plan.Window.TimeIdx]
	if ts.IsNull(row) {
		return "none (NULL event time)"
	}
	spec := r.plan.Window.Spec
	if r.plan.Window.Kind == "SESSION" {
		t := ts.I[row]
		return "session " + exec.FormatTimestamp(types.MillisTime(t)) + "/" + exec.FormatTimestamp(types.MillisTime(t+spec.Gap))
	}
	var parts []string
	for _, w := range spec.WindowsOf(ts.I[row]) {
		parts = append(parts, exec.FormatTimestamp(types.MillisTime(w))+"/"+exec.FormatTimestamp(types.MillisTime(w+spec.Size)))
	}
	return strings.Join(parts, ",")
}
