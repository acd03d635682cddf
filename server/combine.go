package server

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/planner"
	"github.com/turbinesql/turbinesql/shuffle"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/state"
	"github.com/turbinesql/turbinesql/window"
)

// combiner is the pre-aggregation side of a combine hop: one aggregator
// per source partition folds that partition's rows into per-(window, key)
// partial accumulators; when the partition's own watermark passes a
// window's end, the window's partials are shipped to the internal topic
// keyed (murmur2) by the group key, followed by a marker to every internal
// partition saying how far that source partition has shipped. The stream's
// runner is the merge stage behind it.
//
// Its restart position per source partition is the first offset of a row
// in a window not shipped yet, so a restart re-reads exactly what it had
// not handed on; windows shipped before are recorded (the shipped
// watermark) and their rows dropped on the re-read. At-least-once: a crash
// between shipping and committing ships those partials again, and the
// merge stage drops those that arrive after their window closed.
type combiner struct {
	hopLoop
	stream string
	src    *catalog.Source
	plan   *planner.Plan
	outN   int
	name   string // state name

	dec     *exec.JSONDecoder
	aggs    map[int32]*exec.Aggregator
	shipped map[int32]int64 // per source partition: windows ending at or before it were shipped
	hasShip map[int32]bool
	minOff  map[int32]map[int64]int64 // per source partition, window: first offset of a row in it
}

// combineTopic names a combine hop's internal topic.
func combineTopic(app, topic, windowName string) string {
	return "turbine-" + app + "-cmb-" + topic + "-" + windowName
}

func (s *Server) startCombiner(ctx context.Context, def *catalog.Stream, p *planner.Plan, nIn, nOut int) (*combiner, error) {
	topic := combineTopic(s.cfg.AppID, p.Input.Topic, def.Name)
	if err := state.CheckDivisor(topic, nOut, "combine_partitions"); err != nil && !s.cfg.AllowNonDivisor {
		return nil, &sql.Error{Code: sql.CodeInvalidParameter, Message: err.Error(), Err: err}
	}
	have, err := s.kafka.ensureTopic(ctx, topic, nOut, nil)
	if err != nil {
		return nil, err
	}
	if have != nOut {
		return nil, sql.Errorf(sql.CodeInvalidParameter, "combine topic %q exists with %d partitions, not %d", topic, have, nOut).
			WithHint("delete the topic deliberately, or set combine_partitions = %d", have)
	}
	src := p.Input.Source
	c := &combiner{stream: def.Name, src: src, plan: p, outN: nOut, name: "__cmb/" + topic,
		aggs: map[int32]*exec.Aggregator{}, shipped: map[int32]int64{}, hasShip: map[int32]bool{}, minOff: map[int32]map[int64]int64{}}
	c.dec = newDecoder(p.Input)
	c.hopLoop = newHopLoop(s, topic, s.log.With("combine", topic), s.newWatermarks(src.Watermark, src))
	metas, err := s.store.Partitions(c.name)
	if err != nil {
		return nil, err
	}
	ends, err := s.kafka.endOffsets(ctx, src.Topic)
	if err != nil {
		return nil, err
	}
	assign := map[int32]kgo.Offset{}
	for q := int32(0); q < int32(nIn); q++ {
		a, err := buildAggregator(p, 0)
		if err != nil {
			return nil, err
		}
		c.aggs[q] = a
		c.minOff[q] = map[int64]int64{}
		m := metas[q]
		c.wms.Add(q, m.Offset, ends[q], 0, false)
		c.shipped[q], c.hasShip[q] = m.MaxTime, m.HasTime
		assign[q] = kgo.NewOffset().At(m.Offset)
	}
	cl, err := kgo.NewClient(s.kafka.conn.Opts(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{src.Topic: assign}),
		kgo.FetchMaxWait(250*time.Millisecond), kgo.FetchMaxPartitionBytes(8<<20))...)
	if err != nil {
		return nil, fmt.Errorf("consumer for combine hop %s: %w", topic, err)
	}
	c.hopLoop.start(cl, c)
	return c, nil
}

// process folds one fetch into the per-partition aggregators, then ships
// what became due.
func (c *combiner) process(ctx context.Context, fs kgo.Fetches) error {
	touched, err := eachNewPartition(fs, c.wms, func(p int32, recs []*kgo.Record) error {
		return c.fold(ctx, p, recs)
	})
	if err != nil || len(touched) == 0 {
		return err
	}
	return c.handOver(ctx, touched, false)
}

func (c *combiner) fold(ctx context.Context, q int32, recs []*kgo.Record) error {
	values := make([][]byte, len(recs))
	for i, r := range recs {
		values[i] = r.Value
	}
	rec, decoded, derrs := c.dec.Decode(values)
	defer rec.Release()
	if len(derrs) > 0 {
		pol := decodePolicy{name: c.stream, input: c.plan.Input, log: c.log}
		if _, _, err := handleDecodeErrors(ctx, c.srv, pol, q, recs, derrs); err != nil {
			return err
		}
	}
	b := exec.BatchOf(rec, c.plan.Input.Schema)
	fillKafkaTime(c.plan.Input, b, recs, decoded)
	c.srv.statsFor(c.src).observe(b)
	if c.plan.NeedsSeq {
		appendSeq(b, recs, decoded)
	}
	ts := b.Cols[c.plan.Window.TimeIdx]
	size := c.plan.Window.Spec.Size
	var maxTime int64
	hasTime := false
	// Offsets grow within a partition, so a window's first offset is that
	// of the first row seen in it: only a row in another window than the
	// row before needs a look in the map.
	mins := c.minOff[q]
	lastW, haveW := int64(0), false
	for i, idx := range decoded[:b.N] {
		if ts.IsNull(i) {
			continue
		}
		t := ts.I[i]
		if !hasTime || t > maxTime {
			maxTime, hasTime = t, true
		}
		if w := window.FloorTo(t, size); !haveW || w != lastW {
			if _, ok := mins[w]; !ok {
				mins[w] = recs[idx].Offset
			}
			lastW, haveW = w, true
		}
	}
	late, err := c.aggs[q].Consume(b, c.shipped[q], c.hasShip[q])
	if err != nil {
		return fmt.Errorf("%s/%d: %w", c.src.Topic, q, err)
	}
	if len(late) > 0 {
		c.srv.metrics.lateRows.WithLabelValues(c.stream, "dropped").Add(float64(len(late)))
	}
	c.wms.Read(q, recs[len(recs)-1].Offset+1, maxTime, hasTime)
	return nil
}

// handOver sends the partials of the windows the given source partitions'
// watermarks have passed (everything they hold, with all), then a
// marker per partition to every internal partition, then commits the
// restart positions.
func (c *combiner) handOver(ctx context.Context, which map[int32]bool, all bool) error {
	var recs []*kgo.Record
	for q := range which {
		ps := c.wms.Part(q)
		a := c.aggs[q]
		wm := ps.MaxTime - c.wms.Delay
		if !ps.HasTime && !all {
			continue
		}
		for _, part := range a.ShipDue(wm, all) {
			key := part.Key
			// The value is the window start (8 bytes) then the accumulators:
			// a header would cost its name on every partial.
			val := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(part.Enc)), uint64(part.Window))
			recs = append(recs, &kgo.Record{Topic: c.topic, Key: key, Value: append(val, part.Enc...), Partition: state.PartitionFor(key, c.outN)})
			delete(c.minOff[q], part.Window)
		}
		if ps.HasTime && (!c.hasShip[q] || wm > c.shipped[q]) {
			c.shipped[q], c.hasShip[q] = wm, true
		}
	}
	for q := range which {
		ps := c.wms.Part(q)
		idle := c.wms.Idle(ps)
		c.idle[q] = idle
		m := shuffle.Marker{Source: q, MaxTime: ps.MaxTime, HasTime: ps.HasTime, Idle: idle}
		val := m.Encode(nil)
		for r := 0; r < c.outN; r++ {
			recs = append(recs, &kgo.Record{Topic: c.topic, Partition: int32(r), Headers: []kgo.RecordHeader{{Key: shuffle.MarkerHeader, Value: val}}})
		}
	}
	if err := c.srv.kafka.produceSync(ctx, recs); err != nil {
		return fmt.Errorf("write to %s: %w", c.topic, err)
	}
	b := c.srv.store.NewBatch(c.name)
	defer b.Close()
	for q, ps := range c.wms.Parts() {
		restart := ps.Next
		for _, off := range c.minOff[q] {
			restart = min(restart, off)
		}
		if err := b.PutPartition(q, state.PartitionMeta{Offset: restart, MaxTime: c.shipped[q], HasTime: c.hasShip[q]}); err != nil {
			return err
		}
	}
	return b.Commit()
}
