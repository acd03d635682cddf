package dataflow

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/shuffle"
	"github.com/turbinesql/turbinesql/state"
)

// Exchange is a repartition hop's operator: it re-emits each decoded row's
// record (its original value bytes and timestamp) onto the internal topic,
// keyed and placed with murmur2 by the text of column Col; NULL keys are
// unkeyed and all go to partition 0, so they form one group as in SQL. On
// every watermark it tells each internal partition how far its source
// partition has been sent (a marker after the records it covers).
//
// Each copy carries where it came from (SourceHeader: source partition and
// offset). A hop that crashed after writing copies but before committing
// writes them again; the reader (Markers) applies each source offset once.
//
// A row whose event time is NULL is passed on (a stream behind the hop may
// not need one), but a stream windowed by that column dead-letters it: its
// copy also carries the record's original key (KeyHeader), so the dead
// letter is the source's record as it was. Other copies go without.
type Exchange struct {
	Topic      string // the internal topic
	Partitions int    // its partition count
	Col        int    // the column re-keyed by
	// TimeCols are the source's TIMESTAMP columns, any of which a
	// stream behind the hop may window by.
	TimeCols []int

	env *Env
	// The hop's output distribution (turbine_repartition_*), resolved
	// once: counted per batch, not per row.
	recsOut, bytesOut []prometheus.Counter
	nullKeys          prometheus.Counter
	nRecs, nBytes     []int
}

var _ Op = (*Exchange)(nil)

func (x *Exchange) Open(_ context.Context, env *Env) error {
	x.env = env
	m := env.Metrics
	m.RegisterHop(env.Name)
	x.recsOut = make([]prometheus.Counter, x.Partitions)
	x.bytesOut = make([]prometheus.Counter, x.Partitions)
	for q := range x.Partitions {
		p := strconv.Itoa(q)
		x.recsOut[q] = m.RepRecordsOut.WithLabelValues(env.Name, p)
		x.bytesOut[q] = m.RepBytesOut.WithLabelValues(env.Name, p)
	}
	x.nullKeys = m.RepNullKeys.WithLabelValues(env.Name)
	x.nRecs, x.nBytes = make([]int, x.Partitions), make([]int, x.Partitions)
	return nil
}

func (x *Exchange) Process(ctx context.Context, b *Batch) (*Batch, error) {
	col := b.Data.Cols[x.Col]
	n := b.Data.N
	// One allocation each for the batch's records, headers and header
	// values, not three per row.
	recs := make([]kafkaio.Record, n)
	hdrs := make([]kafkaio.Header, n)
	vals := make([]byte, 0, n*2*binary.MaxVarintLen64)
	times := make([]*exec.Vec, 0, len(x.TimeCols))
	for _, c := range x.TimeCols {
		if v := b.Data.Cols[c]; v.Null != nil {
			times = append(times, v)
		}
	}
	nulls := 0
	for i, idx := range b.Src[:n] {
		src := b.Recs[idx]
		at := len(vals)
		vals = appendSource(vals, src.Partition, src.Offset)
		hdrs[i] = kafkaio.Header{Key: SourceHeader, Value: vals[at:len(vals):len(vals)]}
		r := &recs[i]
		*r = kafkaio.Record{Topic: x.Topic, Value: src.Value, Timestamp: src.Timestamp, Headers: hdrs[i : i+1 : i+1]}
		if src.Key != nil && anyNull(times, i) {
			r.Headers = []kafkaio.Header{hdrs[i], {Key: KeyHeader, Value: src.Key}}
		}
		if key := keyText(col, i); key != nil {
			r.Key = key
			r.Partition = state.PartitionFor(key, x.Partitions)
		} else {
			nulls++
		}
		x.nRecs[r.Partition]++
		x.nBytes[r.Partition] += len(r.Value)
		x.env.Out.Produce(ctx, r)
	}
	for q, c := range x.nRecs {
		if c > 0 {
			x.recsOut[q].Add(float64(c))
			x.bytesOut[q].Add(float64(x.nBytes[q]))
			x.nRecs[q], x.nBytes[q] = 0, 0
		}
	}
	if nulls > 0 {
		x.nullKeys.Add(float64(nulls))
	}
	return nil, nil
}

// OnWatermark sends this source partition's marker to every internal
// partition.
func (x *Exchange) OnWatermark(ctx context.Context, wm Watermark) (*Batch, error) {
	SendMarkers(ctx, x.env, x.Topic, x.Partitions, wm)
	return nil, nil
}

func (x *Exchange) Commit(context.Context, *Commit) error { return nil }
func (x *Exchange) Close()                                {}

// markerSender is an operator that sends its task's watermark on in
// markers (SendMarkers) to a stage where every source partition meets.
// Its task's partition then needs a watermark even when idle without an
// event time of its own, or the merge would wait on it forever
// (window.Partition.FeedsMerge).
type markerSender interface{ sendsMarkers() }

var (
	_ markerSender = (*Exchange)(nil)
	_ markerSender = (*PartialAgg)(nil)
)

func (x *Exchange) sendsMarkers()   {}
func (c *PartialAgg) sendsMarkers() {}

// SendMarkers tells each of the n partitions of topic the watermark of the
// task's source partition, after everything it sent before.
func SendMarkers(ctx context.Context, env *Env, topic string, n int, wm Watermark) {
	m := shuffle.Marker{Source: env.Partition, MaxTime: wm.WM, HasTime: wm.Has, Idle: wm.Idle}
	val := m.Encode(nil)
	src := []byte(strconv.Itoa(int(env.Partition)))
	for q := 0; q < n; q++ {
		env.Out.Produce(ctx, &kafkaio.Record{Topic: topic, Partition: int32(q),
			Headers: []kafkaio.Header{{Key: shuffle.MarkerHeader, Value: val}, {Key: "turbine.source.partition", Value: src}}})
	}
}

// SourceHeader is the header of a repartitioned record naming its source
// partition and offset (EncodeSource): short, since every record has one.
const SourceHeader = "turbine.src"

// anyNull reports whether row i is NULL in one of vs.
func anyNull(vs []*exec.Vec, i int) bool {
	for _, v := range vs {
		if v.IsNull(i) {
			return true
		}
	}
	return false
}

// KeyHeader is the header of a repartitioned record without an event time
// holding its source record's key (absent: the key was null).
const KeyHeader = "turbine.key"

// EncodeSource is SourceHeader's value: the partition and offset, varints.
func EncodeSource(p int32, off int64) []byte { return appendSource(make([]byte, 0, 12), p, off) }

func appendSource(dst []byte, p int32, off int64) []byte {
	return binary.AppendUvarint(binary.AppendUvarint(dst, uint64(p)), uint64(off))
}

// DecodeSource reads EncodeSource.
func DecodeSource(v []byte) (p int32, off int64, err error) {
	pp, n := binary.Uvarint(v)
	if n <= 0 {
		return 0, 0, errors.New("bad source header")
	}
	o, m := binary.Uvarint(v[n:])
	if m <= 0 || n+m != len(v) {
		return 0, 0, errors.New("bad source header")
	}
	return int32(pp), int64(o), nil
}

// partialFrom marks a partial that names its source partition.
const partialFrom = 0xC1

// CoverHeader is the header of a combine partial saying what it covers
// (EncodeCover). It is a header, not part of the value, so that a process
// of the previous release, which reads the value and ignores headers it
// does not know, reads a partial of this one as it reads its own (a
// rolling upgrade runs both on one internal topic). A partial without it
// (shipped by such a process) says nothing of what it covers: a merge
// stage takes it for a copy when it comes after its window closed. The
// name is short because it rides on every partial: a small COUNT's
// partial is about 20 bytes, and "turbine.partial.cover" added 21 more.
const CoverHeader = "tc"

// PartialCover is what a combine partial covers of its source partition's
// rows of its group: the highest source offset folded in (-1: none), and
// how many rows were folded in since that source last shipped the group
// (all it holds after a restart of the pre-aggregation, less the rows it
// had read before). A merge stage tells by it a partial shipped again from
// one that carries rows a closed pane never had (latepartials.go).
type PartialCover struct {
	Last int64
	Rows uint64
}

// EncodeCover is CoverHeader's value: Last+1 and Rows, uvarints (2 to 4
// bytes for most partials).
func EncodeCover(c PartialCover) []byte {
	return binary.AppendUvarint(binary.AppendUvarint(make([]byte, 0, 12), uint64(c.Last+1)), c.Rows)
}

// errCover: a CoverHeader value EncodeCover did not write.
var errCover = errors.New("bad partial cover header")

// DecodeCover reads EncodeCover. Bytes after the two varints are left for
// a later release to add to (read as now, they are ignored).
func DecodeCover(v []byte) (PartialCover, error) {
	last, a := binary.Uvarint(v)
	if a <= 0 || last > math.MaxInt64 {
		return PartialCover{}, fmt.Errorf("%w: %x", errCover, v)
	}
	rows, b := binary.Uvarint(v[a:])
	if b <= 0 {
		return PartialCover{}, fmt.Errorf("%w: %x", errCover, v)
	}
	return PartialCover{Last: int64(last) - 1, Rows: rows}, nil
}

// coverOf reads a partial record's CoverHeader (ok false: it has none).
func coverOf(rec *kafkaio.Record) (c PartialCover, ok bool, err error) {
	v, ok := header(rec, CoverHeader)
	if !ok {
		return PartialCover{}, false, nil
	}
	c, err = DecodeCover(v)
	return c, err == nil, err
}

// EncodePartial is a combine partial's record value: a mark, the source
// partition that shipped it (varint), the window start (8 bytes; headers
// would cost their names on every partial), then the accumulators.
func EncodePartial(source int32, window int64, enc []byte) []byte {
	val := make([]byte, 0, 14+len(enc))
	val = append(val, partialFrom)
	val = binary.AppendUvarint(val, uint64(source))
	val = binary.BigEndian.AppendUint64(val, uint64(window))
	return append(val, enc...)
}

// DecodePartial reads EncodePartial, and the older form without the
// source (hasSource false): the window start, then the accumulators.
func DecodePartial(v []byte) (source int32, hasSource bool, window int64, enc []byte, err error) {
	if len(v) > 0 && v[0] == partialFrom {
		q, n := binary.Uvarint(v[1:])
		if n <= 0 || len(v) < 1+n+8 {
			return 0, false, 0, nil, errors.New("a partial without its window")
		}
		v = v[1+n:]
		return int32(q), true, int64(binary.BigEndian.Uint64(v)), v[8:], nil
	}
	if len(v) < 8 {
		return 0, false, 0, nil, errors.New("a partial without its window")
	}
	return 0, false, int64(binary.BigEndian.Uint64(v)), v[8:], nil
}
