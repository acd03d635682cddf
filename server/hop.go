package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/shuffle"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/state"
	"github.com/turbinesql/turbinesql/window"
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
	srv    *Server
	src    *catalog.Source
	column string
	colIdx int
	topic  string // the internal topic
	outN   int
	name   string // its state's name in the store
	log    *slog.Logger

	dec     *exec.JSONDecoder
	wms     *window.Watermarks // source partitions: positions, event time, idleness
	idle    map[int32]bool     // idleness last announced per source partition
	cl      *kgo.Client
	cancel  context.CancelFunc
	done    chan struct{}
	refs    int
	flushCh chan *flushReq
	pending []*flushReq
	mu      sync.Mutex
	err     error
	emitted int64
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
	h := &hop{srv: s, src: src, column: column, colIdx: src.Schema.Index(column), topic: topic, outN: nOut,
		name: "__hop/" + topic, log: s.log.With("hop", topic), idle: map[int32]bool{}, refs: 1, done: make(chan struct{}),
		flushCh: make(chan *flushReq)}
	h.dec = exec.NewJSONDecoder(decodeSchema(&catalog.Relation{Schema: src.Schema, Source: src}), nil)
	delay := int64(0)
	if src.Watermark != nil {
		delay = src.Watermark.DelayMs
	}
	idle := src.IdleTimeoutMs
	if idle <= 0 {
		idle = DefaultIdleTimeoutMs
	}
	h.wms = window.NewWatermarks(delay, time.Duration(idle)*time.Millisecond, s.clock)
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
	h.cl, err = kgo.NewClient(
		kgo.SeedBrokers(h.srv.kafka.brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{h.src.Topic: assign}),
		kgo.FetchMaxWait(250*time.Millisecond),
		kgo.FetchMaxPartitionBytes(8<<20),
	)
	if err != nil {
		return fmt.Errorf("consumer for repartition hop %s: %w", h.topic, err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go h.loop(rctx)
	return nil
}

func (h *hop) stop() {
	h.cancel()
	<-h.done
	h.cl.Close()
}

func (h *hop) failed() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

func (h *hop) loop(ctx context.Context) {
	defer close(h.done)
	fetches := make(chan kgo.Fetches)
	go pollInto(ctx, h.cl, h.srv.pollRecords(), fetches)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	// Markers for everything restored, so readers hear from every source
	// partition at once.
	all := map[int32]bool{}
	for p := range h.wms.Parts() {
		all[p] = true
	}
	if err := h.sendMarkers(ctx, all); err != nil && ctx.Err() == nil {
		h.fail(err)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if h.failed() != nil {
				continue
			}
			// Announce source partitions that went idle or came back.
			changed := map[int32]bool{}
			for p, ps := range h.wms.Parts() {
				if idle := h.wms.Idle(ps); idle != h.idle[p] {
					changed[p] = true
				}
			}
			if len(changed) > 0 {
				if err := h.sendMarkers(ctx, changed); err != nil && ctx.Err() == nil {
					h.fail(err)
				}
			}
		case fs := <-fetches:
			if h.failed() != nil {
				continue
			}
			if err := h.process(ctx, fs); err != nil && ctx.Err() == nil {
				h.fail(err)
			}
		case req := <-h.flushCh:
			h.pending = append(h.pending, req)
		}
		h.checkPending(ctx)
	}
}

// flush blocks until the hop has re-emitted its source up to targets and
// told every internal partition so (a FLUSH: source partitions read to
// their end are idle, as they are for a stream reading its source).
func (h *hop) flush(ctx context.Context, targets map[int32]int64) error {
	return requestFlush(ctx, h.flushCh, h.done, fmt.Errorf("repartition hop %s stopped", h.topic), targets)
}

func (h *hop) checkPending(ctx context.Context) {
	if len(h.pending) > 0 {
		h.pending = answerHopFlushes(h.pending, h.wms, h.failed(), "repartition hop "+h.topic, func(flushed map[int32]bool) error {
			return h.sendMarkers(ctx, flushed)
		})
	}
}

func (h *hop) fail(err error) {
	h.mu.Lock()
	h.err = err
	h.mu.Unlock()
	h.log.Error("repartition hop failed", "err", err)
}

// process re-emits one fetch, then sends markers and commits positions.
func (h *hop) process(ctx context.Context, fs kgo.Fetches) error {
	for _, fe := range fs.Errors() {
		if errors.Is(fe.Err, context.Canceled) {
			return nil
		}
		return fmt.Errorf("read %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
	}
	var out []*kgo.Record
	touched := map[int32]bool{}
	var err error
	fs.EachPartition(func(fp kgo.FetchTopicPartition) {
		ps := h.wms.Part(fp.Partition)
		if err != nil || ps == nil {
			return
		}
		h.wms.SawEnd(fp.Partition, fp.HighWatermark)
		recs := fp.Records
		for len(recs) > 0 && recs[0].Offset < ps.Next {
			recs = recs[1:]
		}
		if len(recs) == 0 {
			return
		}
		var rs []*kgo.Record
		rs, err = h.rekey(ctx, fp.Partition, recs)
		out = append(out, rs...)
		touched[fp.Partition] = true
	})
	if err != nil {
		return err
	}
	if len(touched) == 0 {
		return nil
	}
	if err := h.srv.kafka.produceSync(ctx, out); err != nil {
		return fmt.Errorf("write to %s: %w", h.topic, err)
	}
	h.mu.Lock()
	h.emitted += int64(len(out))
	h.mu.Unlock()
	if err := h.sendMarkers(ctx, touched); err != nil {
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

// sendMarkers tells every internal partition how far the given source
// partitions have been sent, and whether they are idle.
func (h *hop) sendMarkers(ctx context.Context, which map[int32]bool) error {
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
