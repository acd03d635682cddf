// Package shuffle holds the pieces of the hops that move records between
// partitions through internal Kafka topics: their names, the watermark
// markers a hop sends alongside the records, and the tracking of those
// markers on the reading side.
//
// A repartition hop re-emits every record of a source onto
// turbine-{app}-rep-{topic}-by-{column} (named by streamplan.TopicName),
// keyed and placed (murmur2) by the column's value. A partition of that topic receives records from every
// source partition interleaved, so its own records say nothing about how
// far the slowest source partition has got. The hop therefore also sends,
// to every partition of the internal topic, a marker per source partition:
// "everything of source partition p up to event time t has been sent" (or
// "p is idle"). A reader's watermark on an internal partition is the
// minimum over the source partitions' watermarks: a window closes only once
// every source partition has passed it. A source partition that is idle
// sends the watermark idleness gave it (window.Partition: it advances with
// processing time, never past the peers' watermark its task knew before it
// last found nothing more to read on a fresh end offset, and one that never
// had data takes that peers' watermark), so a quiet partition never holds
// readers back for good. A source partition without a watermark, idle or
// not, holds them: its first rows may belong to any window (the seed: "a
// slow partition delays results rather than corrupting them").
package shuffle

import (
	"encoding/binary"
	"errors"
)

// MarkerHeader is the Kafka header that makes a record a watermark marker
// rather than data; its value is the marker's encoding.
const MarkerHeader = "turbine.marker"

// Marker says how far source partition Source has been sent: its
// watermark is MaxTime (HasTime false: none yet), and every record it sent
// before the marker has gone out. Idle: the source partition had nothing
// to read on a fresh end offset (or a FLUSH read it to its end); its
// MaxTime is then what idleness gave it. A marker without a time holds
// the reader, idle or not: earlier releases sent an idle partition that
// never had data that way meaning "leave me out", which let a window close
// before that partition's first rows, written with a peer's, arrived.
type Marker struct {
	Source  int32
	MaxTime int64
	HasTime bool
	Idle    bool
}

const markerV1 = 1

// Encode appends the marker's header value.
func (m Marker) Encode(dst []byte) []byte {
	flags := byte(0)
	if m.HasTime {
		flags |= 1
	}
	if m.Idle {
		flags |= 2
	}
	dst = append(dst, markerV1, flags)
	dst = binary.BigEndian.AppendUint32(dst, uint32(m.Source))
	return binary.BigEndian.AppendUint64(dst, uint64(m.MaxTime))
}

// ErrBadMarker is a marker header that cannot be read.
var ErrBadMarker = errors.New("shuffle: corrupt watermark marker")

// DecodeMarker reads a marker header value.
func DecodeMarker(b []byte) (Marker, error) {
	if len(b) != 14 || b[0] != markerV1 {
		return Marker{}, ErrBadMarker
	}
	return Marker{
		HasTime: b[1]&1 != 0,
		Idle:    b[1]&2 != 0,
		Source:  int32(binary.BigEndian.Uint32(b[2:])),
		MaxTime: int64(binary.BigEndian.Uint64(b[6:])),
	}, nil
}

// Progress tracks the markers one internal partition has received.
type Progress struct {
	sources map[int32]Marker
	want    int // source partitions that must report before there is a time
}

// NewProgress expects markers from nSources source partitions.
func NewProgress(nSources int) *Progress {
	return &Progress{sources: map[int32]Marker{}, want: nSources}
}

// Observe records a marker (a later one for the same source replaces it;
// markers of one source arrive in order on one internal partition).
func (p *Progress) Observe(m Marker) {
	if old, ok := p.sources[m.Source]; ok && old.HasTime && (!m.HasTime || m.MaxTime < old.MaxTime) {
		m.MaxTime, m.HasTime = old.MaxTime, true // never back
	}
	p.sources[m.Source] = m
}

// Time is the watermark this internal partition has reached: the minimum
// over the source partitions' watermarks. ok is false until every source
// partition has reported one: a source partition without a watermark, idle
// or not, holds the reader (its sending side gives an idle one its peers'
// watermark as soon as that is safe: window.Partition).
func (p *Progress) Time() (t int64, ok bool) {
	if len(p.sources) < p.want {
		return 0, false
	}
	for _, m := range p.sources {
		if !m.HasTime {
			return 0, false
		}
		if !ok || m.MaxTime < t {
			t, ok = m.MaxTime, true
		}
	}
	return t, ok
}

// Slowest names the source partition that holds this internal partition
// back: the one with the smallest watermark (ok false when none has
// reported one).
func (p *Progress) Slowest() (source int32, t int64, ok bool) {
	for _, m := range p.sources {
		if !m.HasTime {
			continue
		}
		if !ok || m.MaxTime < t {
			source, t, ok = m.Source, m.MaxTime, true
		}
	}
	return source, t, ok
}
