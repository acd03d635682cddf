// Package purge deletes the records of internal topics that every reader
// has consumed, as Kafka Streams does for its repartition topics: the
// engine's hop topics (repartition and combine) would otherwise grow
// without bound, since their readers never look back past their
// committed offsets.
//
// The rule is the only safety argument: a partition is purged up to the
// smallest offset its reader groups have committed, and not at all while
// one of them has committed nothing there. Committed offsets only move
// forward and records below them are never fetched again (a restarted
// task resumes from its group's offset, or restores its state from its
// changelog), so several processes purging the same topic at once, each
// from a slightly different view, can only delete what all of them would.
// Which groups read a topic, and whether that set can still grow, is the
// caller's to say (Target).
package purge

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

// Kafka is what the purger needs of the cluster.
type Kafka interface {
	// StartOffsets: the first readable offset of each partition.
	StartOffsets(ctx context.Context, topic string) (map[int32]int64, error)
	// GroupOffsets: the offsets group has committed on topic.
	GroupOffsets(ctx context.Context, group, topic string) (map[int32]int64, error)
	// DeleteRecordsBefore moves each partition's start up to to[p] and
	// returns the new starts.
	DeleteRecordsBefore(ctx context.Context, topic string, to map[int32]int64) (map[int32]int64, error)
}

// Target is a topic to purge and every consumer group that reads it.
type Target struct {
	Topic   string
	Readers []string
	// Ready, when set, is asked before the topic's deletion in a round,
	// with how many records could go; false skips the topic this round (a
	// repartition generation that must first be sealed to new readers:
	// its reader set is only final once the seal is in the catalog log).
	Ready func(ctx context.Context, purgeable int64) (bool, error)
}

// Point is where each partition can be purged to: the smallest offset
// the readers have committed there. A partition that any reader has not
// committed (no offset, or a negative one) is left out, and so is every
// partition when there is no reader.
func Point(committed []map[int32]int64) map[int32]int64 {
	if len(committed) == 0 {
		return map[int32]int64{}
	}
	out := map[int32]int64{}
	for p, o := range committed[0] {
		out[p] = o
	}
	for p, o := range out {
		for _, c := range committed {
			at, ok := c[p]
			if !ok || at < 0 {
				delete(out, p)
				break
			}
			o = min(o, at)
		}
		if _, kept := out[p]; kept {
			out[p] = o
		}
	}
	return out
}

// Purger purges its targets when asked (Round).
type Purger struct {
	Kafka   Kafka
	Targets func() []Target
	// Purged counts the records deleted, by topic (nil: not counted).
	Purged *prometheus.CounterVec
	Log    *slog.Logger
}

// NewPurgedCounter is the series Purger.Purged expects, registered on reg.
func NewPurgedCounter(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "turbine_hop_records_purged_total",
		Help: "Records of internal hop topics (repartition, combine) deleted after every reader had committed past them.",
	}, []string{"topic"})
	reg.MustRegister(c)
	return c
}

// Round purges every target once and returns how many records it
// deleted, by topic. A topic that fails is logged and retried next round.
func (p *Purger) Round(ctx context.Context) map[string]int64 {
	out := map[string]int64{}
	for _, t := range p.Targets() {
		n, err := p.purge(ctx, t)
		if err != nil {
			if ctx.Err() == nil {
				p.Log.Warn("cannot purge consumed records of an internal topic; retrying next round", "topic", t.Topic, "err", err)
			}
			continue
		}
		if n > 0 {
			out[t.Topic] = n
		}
	}
	return out
}

func (p *Purger) purge(ctx context.Context, t Target) (int64, error) {
	if len(t.Readers) == 0 {
		return 0, nil
	}
	start, err := p.Kafka.StartOffsets(ctx, t.Topic)
	if err != nil {
		return 0, err
	}
	committed := make([]map[int32]int64, 0, len(t.Readers))
	for _, g := range t.Readers {
		c, err := p.Kafka.GroupOffsets(ctx, g, t.Topic)
		if err != nil {
			return 0, err
		}
		committed = append(committed, c)
	}
	to := map[int32]int64{}
	var purgeable int64
	for part, o := range Point(committed) {
		if s, ok := start[part]; ok && o > s {
			to[part] = o
			purgeable += o - s
		}
	}
	if len(to) == 0 {
		return 0, nil
	}
	if t.Ready != nil {
		ok, err := t.Ready(ctx, purgeable)
		if err != nil || !ok {
			return 0, err
		}
	}
	now, err := p.Kafka.DeleteRecordsBefore(ctx, t.Topic, to)
	var n int64
	for part, o := range now {
		n += max(0, o-start[part])
	}
	if n > 0 {
		if p.Purged != nil {
			p.Purged.WithLabelValues(t.Topic).Add(float64(n))
		}
		p.Log.Info("purged consumed records of an internal topic", "topic", t.Topic, "records", n, "partitions", len(now), "readers", len(t.Readers))
	}
	return n, err
}
