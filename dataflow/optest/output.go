package optest

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/turbinesql/turbinesql/dataflow"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/shuffle"
)

// Output is what a task made visible in Kafka, in the order it did:
// output rows and panes, late rows, dead letters, a hop's copies, a
// combine's partials and markers. (The stage's changelog and progress
// records are the runtime's own, and left out.)
type Output []*kafkaio.Record

// Topic is the records of o written to topic name.
func (o Output) Topic(name string) Output {
	var out Output
	for _, r := range o {
		if r.Topic == name {
			out = append(out, r)
		}
	}
	return out
}

// Data is o without the watermark markers a hop or a combine sends.
func (o Output) Data() Output {
	var out Output
	for _, r := range o {
		if _, ok := header(r, shuffle.MarkerHeader); !ok {
			out = append(out, r)
		}
	}
	return out
}

// Marker is one watermark marker of o, with the internal partition it
// went to.
type Marker struct {
	shuffle.Marker
	Partition int32
}

// Markers decodes the watermark markers of o.
func (o Output) Markers() ([]Marker, error) {
	var out []Marker
	for _, r := range o {
		v, ok := header(r, shuffle.MarkerHeader)
		if !ok {
			continue
		}
		m, err := shuffle.DecodeMarker(v)
		if err != nil {
			return nil, fmt.Errorf("%s/%d offset %d: %w", r.Topic, r.Partition, r.Offset, err)
		}
		out = append(out, Marker{Marker: m, Partition: r.Partition})
	}
	return out, nil
}

// Partial is one partial of a combine's pre-aggregation in o, decoded
// (dataflow.DecodePartial, dataflow.DecodeCover).
type Partial struct {
	// Source is the source partition that shipped it; Named false: the
	// partial does not say (written before partials named their source).
	Source int32
	Named  bool
	// Window is its window's start (its slice's, for HOP).
	Window int64
	// Cover is what it covers of its source partition's rows of the group
	// (its dataflow.CoverHeader); HasCover false: it has no such header,
	// as the previous release's partials have not.
	Cover    dataflow.PartialCover
	HasCover bool
	// Record is the record itself (its Key: the group's).
	Record *kafkaio.Record
}

// Partials decodes o's records as a combine's partials, its watermark
// markers left out; a value or a cover header the pre-aggregation did not
// write is an error.
func (o Output) Partials() ([]Partial, error) {
	var out []Partial
	for _, r := range o.Data() {
		src, named, w, _, err := dataflow.DecodePartial(r.Value)
		if err != nil {
			return nil, fmt.Errorf("%s/%d offset %d: %w", r.Topic, r.Partition, r.Offset, err)
		}
		p := Partial{Source: src, Named: named, Window: w, Record: r}
		if v, ok := header(r, dataflow.CoverHeader); ok {
			if p.Cover, err = dataflow.DecodeCover(v); err != nil {
				return nil, fmt.Errorf("%s/%d offset %d: %w", r.Topic, r.Partition, r.Offset, err)
			}
			p.HasCover = true
		}
		out = append(out, p)
	}
	return out, nil
}

// Values decodes the JSON values of o's records (a tombstone: nil).
func (o Output) Values() ([]map[string]any, error) {
	out := make([]map[string]any, 0, len(o))
	for _, r := range o {
		if r.Value == nil {
			out = append(out, nil)
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(r.Value, &m); err != nil {
			return nil, fmt.Errorf("%s/%d offset %d: %q: %w", r.Topic, r.Partition, r.Offset, r.Value, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// Pane is one pane record of a windowed stream, decoded: its identity
// (the headers the sink writes, dataflow.HeaderKey and the window's) and
// its row.
type Pane struct {
	// Stream names the stream (dataflow.HeaderStream).
	Stream string
	// Key is the group key (nil with HasKey: NULL; HasKey false: a
	// keyless window's pane).
	Key    []byte
	HasKey bool
	// Start and End bound the window, epoch milliseconds.
	Start, End int64
	// Row is the pane's value.
	Row map[string]any
	// Record is the record itself.
	Record *kafkaio.Record
}

// Panes decodes o's records as panes; a record without a window's
// headers is an error.
func (o Output) Panes() ([]Pane, error) {
	rows, err := o.Values()
	if err != nil {
		return nil, err
	}
	out := make([]Pane, len(o))
	for i, r := range o {
		p := Pane{Row: rows[i], Record: r}
		s, hasStart := header(r, dataflow.HeaderWindowStart)
		e, hasEnd := header(r, dataflow.HeaderWindowEnd)
		if !hasStart || !hasEnd {
			return nil, fmt.Errorf("%s/%d offset %d: not a pane (no window headers: %v)", r.Topic, r.Partition, r.Offset, r.Headers)
		}
		if p.Start, err = strconv.ParseInt(string(s), 10, 64); err == nil {
			p.End, err = strconv.ParseInt(string(e), 10, 64)
		}
		if err != nil {
			return nil, fmt.Errorf("%s/%d offset %d: window headers: %w", r.Topic, r.Partition, r.Offset, err)
		}
		st, _ := header(r, dataflow.HeaderStream)
		p.Stream = string(st)
		p.Key, p.HasKey = header(r, dataflow.HeaderKey)
		out[i] = p
	}
	return out, nil
}

func header(r *kafkaio.Record, key string) ([]byte, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return h.Value, true
		}
	}
	return nil, false
}
