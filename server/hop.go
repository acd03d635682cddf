package server

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/shuffle"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/state"
)

// hop is a repartition hop: it reads every partition of a source, and
// re-emits each decodable record (original key bytes aside: the key is the
// column's value; original value bytes and timestamp) onto the internal
// topic, placed with murmur2 on the column's text; NULL keys all go to
// partition 0. After each batch is acknowledged it sends every internal
// partition a watermark marker per source partition it read (shuffle
// package), and commits its source positions. At-least-once: a crash
// between the produce and the commit re-emits that batch.
//
// Streams with the same (topic, column) share one hop: it runs while any
// of them does.
type hop struct {
	hopLoop
	src    *catalog.Source
	column string
	colIdx int
	outN   int
	name   string // its state's name in the store

	dec  *exec.JSONDecoder
	refs int
}

// hopFor returns the running hop of (source, column), starting it for the
// first stream that needs it. nOut is the internal topic's partition count
// (repartition_partitions, default the source's count); an existing topic
// with another count is refused.
func (s *Server) hopFor(ctx context.Context, src *catalog.Source, column string, nIn, nOut int, declared bool) (*hop, error) {
	topic := shuffle.RepartitionTopic(s.cfg.AppID, src.Topic, []string{column})
	if h, ok := s.hops[topic]; ok {
		if declared && h.outN != nOut {
			return nil, sql.Errorf(sql.CodeInvalidParameter, "repartition topic %q runs with %d partitions, not the %d requested", topic, h.outN, nOut).
				WithHint("streams sharing a repartition hop share its topic: drop repartition_partitions or set it to %d", h.outN)
		}
		h.refs++
		return h, nil
	}
	if err := state.CheckDivisor(topic, nOut, "repartition_partitions"); err != nil && !s.cfg.AllowNonDivisor {
		return nil, &sql.Error{Code: sql.CodeInvalidParameter, Message: err.Error(), Err: err}
	}
	have, err := s.kafka.ensureTopic(ctx, topic, nOut, nil)
	if err != nil {
		return nil, err
	}
	if have != nOut {
		return nil, sql.Errorf(sql.CodeInvalidParameter, "repartition topic %q exists with %d partitions, not %d", topic, have, nOut).
			WithHint("changing the count would move every key: delete the topic deliberately, or set repartition_partitions = %d", have)
	}
	h := &hop{src: src, column: column, colIdx: src.Schema.Index(column), outN: nOut, name: "__hop/" + topic, refs: 1}
	h.dec = newDecoder(&catalog.Relation{Schema: src.Schema, Source: src})
	h.hopLoop = newHopLoop(s, topic, s.log.With("hop", topic), s.newWatermarks(src.Watermark, src))
	if err := h.start(ctx, nIn); err != nil {
		return nil, err
	}
	s.hops[topic] = h
	return h, nil
}

// release drops one stream's use of the hop, stopping it after the last.
func (s *Server) releaseHop(h *hop) {
	h.refs--
	if h.refs > 0 {
		return
	}
	h.stop()
	delete(s.hops, h.topic)
}

func (h *hop) start(ctx context.Context, nIn int) error {
	metas, err := h.srv.store.Partitions(h.name)
	if err != nil {
		return err
	}
	ends, err := h.srv.kafka.endOffsets(ctx, h.src.Topic)
	if err != nil {
		return fmt.Errorf("repartition hop %s: %w", h.topic, err)
	}
	assign := map[int32]kgo.Offset{}
	for p := int32(0); p < int32(nIn); p++ {
		m := metas[p]
		h.wms.Add(p, m.Offset, ends[p], m.MaxTime, m.HasTime)
		assign[p] = kgo.NewOffset().At(m.Offset)
	}
	cl, err := kgo.NewClient(h.srv.kafka.conn.Opts(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{h.src.Topic: assign}),
		kgo.FetchMaxWait(250*time.Millisecond),
		kgo.FetchMaxPartitionBytes(8<<20),
	)...)
	if err != nil {
		return fmt.Errorf("consumer for repartition hop %s: %w", h.topic, err)
	}
	h.hopLoop.start(cl, h)
	return nil
}

// process re-emits one fetch, then sends markers and commits positions.
func (h *hop) process(ctx context.Context, fs kgo.Fetches) error {
	var out []*kgo.Record
	touched, err := eachNewPartition(fs, h.wms, func(p int32, recs []*kgo.Record) error {
		rs, err := h.rekey(ctx, p, recs)
		out = append(out, rs...)
		return err
	})
	if err != nil || len(touched) == 0 {
		return err
	}
	if err := h.srv.kafka.produceSync(ctx, out); err != nil {
		return fmt.Errorf("write to %s: %w", h.topic, err)
	}
	if err := h.handOver(ctx, touched, false); err != nil {
		return err
	}
	b := h.srv.store.NewBatch(h.name)
	defer b.Close()
	for p, ps := range h.wms.Parts() {
		if err := b.PutPartition(p, state.PartitionMeta{Offset: ps.Next, MaxTime: ps.MaxTime, HasTime: ps.HasTime}); err != nil {
			return err
		}
	}
	return b.Commit()
}

// rekey decodes one partition's records (the source's on_error policy
// applies here) and builds their re-keyed copies.
func (h *hop) rekey(ctx context.Context, p int32, recs []*kgo.Record) ([]*kgo.Record, error) {
	values := make([][]byte, len(recs))
	for i, r := range recs {
		values[i] = r.Value
	}
	rec, decoded, derrs := h.dec.Decode(values)
	defer rec.Release()
	if len(derrs) > 0 {
		pol := decodePolicy{name: h.topic, input: &catalog.Relation{Name: h.src.Name, Topic: h.src.Topic, Source: h.src}, log: h.log}
		if _, _, err := handleDecodeErrors(ctx, h.srv, pol, p, recs, derrs); err != nil {
			return nil, err
		}
	}
	b := exec.BatchOf(rec, h.src.Schema)
	in := &catalog.Relation{Schema: h.src.Schema, Source: h.src}
	fillKafkaTime(in, b, recs, decoded)
	h.srv.statsFor(h.src).observe(b)
	var maxTime int64
	hasTime := false
	if h.src.Watermark != nil {
		ts := b.Cols[h.src.Schema.Index(h.src.Watermark.Column)]
		for i := 0; i < b.N; i++ {
			if !ts.IsNull(i) && (!hasTime || ts.I[i] > maxTime) {
				maxTime, hasTime = ts.I[i], true
			}
		}
	}
	col := b.Cols[h.colIdx]
	out := make([]*kgo.Record, 0, b.N)
	for i, idx := range decoded[:b.N] {
		src := recs[idx]
		r := &kgo.Record{Topic: h.topic, Value: src.Value, Timestamp: src.Timestamp}
		if key := exec.PartitionKeyText(col, i, nil); key != nil || !col.IsNull(i) {
			if key == nil {
				key = []byte{}
			}
			r.Key = key
			r.Partition = state.PartitionFor(key, h.outN)
		} // NULL: unkeyed, all on partition 0, one group as in SQL
		out = append(out, r)
	}
	h.wms.Read(p, recs[len(recs)-1].Offset+1, maxTime, hasTime)
	return out, nil
}

// handOver tells every internal partition how far the given source
// partitions have been sent, and whether they are idle.
func (h *hop) handOver(ctx context.Context, which map[int32]bool, _ bool) error {
	var recs []*kgo.Record
	for p := range which {
		ps := h.wms.Part(p)
		if ps == nil {
			continue
		}
		idle := h.wms.Idle(ps)
		h.idle[p] = idle
		m := shuffle.Marker{Source: p, MaxTime: ps.MaxTime, HasTime: ps.HasTime, Idle: idle}
		val := m.Encode(nil)
		for q := 0; q < h.outN; q++ {
			recs = append(recs, &kgo.Record{Topic: h.topic, Partition: int32(q),
				Headers: []kgo.RecordHeader{{Key: shuffle.MarkerHeader, Value: val}, {Key: "turbine.source.partition", Value: []byte(strconv.Itoa(int(p)))}}})
		}
	}
	if err := h.srv.kafka.produceSync(ctx, recs); err != nil {
		return fmt.Errorf("write markers to %s: %w", h.topic, err)
	}
	return nil
}
