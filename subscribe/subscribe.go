// Package subscribe turns a relation's topic into rows as they are
// committed, for SUBSCRIBE TO: the records already there first (the
// snapshot, when asked for), then every record written after, decoded with
// the relation's schema.
//
//   - A windowed stream's rows are panes; each carries is_final (the
//     stream's own column under EMIT EVERY, else always true: only final
//     panes are written).
//   - An upsert stream's topic is a changelog, so its rows are changes, as
//     Materialize's SUBSCRIBE gives them: a key's new value comes as the
//     row with diff +1, after its old value with diff -1; a tombstone
//     retracts the old value. The snapshot is the current value of each
//     key (diff +1).
//   - Anything else (a stateless stream, a source) gives its rows as they
//     are.
//
// It knows nothing of the wire: the caller pulls rows with Next or Fetch.
package subscribe

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/dataflow"
	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/types"
)

// Column names SUBSCRIBE adds to a relation's own columns.
const (
	IsFinalColumn = "is_final"
	DiffColumn    = "diff"
)

// quietSnapshot ends the snapshot when a read brings nothing for this long,
// even if a partition's end offset was not reached: records of a
// transaction still open when the subscription started are not readable
// until it ends.
const quietSnapshot = 300 * time.Millisecond

// Options of one subscription.
type Options struct {
	// Snapshot: the relation's current contents come first. Without it
	// only rows committed after the start are given.
	Snapshot bool
}

// Subscription follows one relation. It is not safe for concurrent use:
// one statement (or cursor) reads it.
type Subscription struct {
	rel    *catalog.Relation
	tail   *kafkaio.Tail
	schema types.Schema
	exprs  []exec.Expr
	dec    *exec.JSONDecoder

	// addFinal: a windowed stream without its own is_final column.
	addFinal bool
	upsert   *changelog // nil unless the relation is an upsert stream

	// pending holds the log end offset of each partition whose snapshot
	// is not read yet; emitSnapshot says whether the snapshot is given
	// (an upsert stream reads it even when not, to know old values).
	pending      map[int32]int64
	emitSnapshot bool

	ready [][]any // rows decoded and not handed out yet
}

// Open starts a subscription to rel on k.
func Open(ctx context.Context, k *kafkaio.Client, rel *catalog.Relation, o Options) (*Subscription, error) {
	s := &Subscription{rel: rel, dec: dataflow.NewDecoder(rel), emitSnapshot: o.Snapshot, schema: ShapeOf(rel)}
	for i, f := range rel.Schema {
		s.exprs = append(s.exprs, &exec.ColRef{Idx: i, Name: f.Name, T: f.Type})
	}
	st := rel.Stream
	s.addFinal = addsFinal(rel)
	from := kafkaio.TailFromEnd
	if o.Snapshot {
		from = kafkaio.TailFromStart
	}
	if st != nil && st.Upsert {
		s.upsert = newChangelog(rel)
		// A change retracts the key's old value, which only the topic's
		// history holds: read it whether or not it is given.
		from = kafkaio.TailFromStart
	}
	tail, pending, err := k.NewTail(ctx, rel.Topic, from, rel.From)
	if err != nil {
		return nil, fmt.Errorf("subscribe to %s: %w", rel.Name, err)
	}
	s.tail, s.pending = tail, pending
	if len(s.pending) == 0 {
		s.endSnapshot()
	}
	return s, nil
}

// ShapeOf is the shape of a subscription's rows to rel: its columns, then
// is_final (windowed streams without their own) or diff (upsert streams).
func ShapeOf(rel *catalog.Relation) types.Schema {
	sc := append(types.Schema(nil), rel.Schema...)
	if addsFinal(rel) {
		sc = append(sc, types.Field{Name: IsFinalColumn, Type: types.Bool})
	}
	if rel.Stream != nil && rel.Stream.Upsert {
		sc = append(sc, types.Field{Name: DiffColumn, Type: types.Int})
	}
	return sc
}

func addsFinal(rel *catalog.Relation) bool {
	return rel.Stream != nil && rel.Stream.Windowed && rel.Schema.Index(IsFinalColumn) < 0
}

// Buffered is how many rows are decoded and not handed out yet.
func (s *Subscription) Buffered() int { return len(s.ready) }

// Schema is the shape of the rows: the relation's columns, then is_final
// (windowed streams without their own) or diff (upsert streams).
func (s *Subscription) Schema() types.Schema { return s.schema }

// Close stops reading and frees the Kafka client.
func (s *Subscription) Close() { s.tail.Close() }

// Next returns the next row, waiting for one as long as ctx allows.
func (s *Subscription) Next(ctx context.Context) ([]any, error) {
	for len(s.ready) == 0 {
		if err := s.read(ctx); err != nil {
			return nil, err
		}
	}
	row := s.ready[0]
	s.ready[0] = nil
	s.ready = s.ready[1:]
	return row, nil
}

// Fetch returns up to n rows (n < 0: no limit): the rows ready now (once
// the snapshot is read), or if none, those of the first read that brings
// some. It waits at most wait
// (< 0: as long as ctx allows; 0: only for what is already fetched) and
// then returns no rows.
func (s *Subscription) Fetch(ctx context.Context, n int, wait time.Duration) ([][]any, error) {
	if n == 0 {
		return nil, nil
	}
	// The snapshot is given whole: a FETCH right after DECLARE sees the
	// relation's contents, not the part one read brought.
	for len(s.pending) > 0 {
		if err := s.read(ctx); err != nil {
			return nil, err
		}
	}
	if len(s.ready) == 0 {
		rctx := ctx
		if wait == 0 {
			wait = 10 * time.Millisecond // records the client holds already
		}
		if wait > 0 {
			var cancel context.CancelFunc
			rctx, cancel = context.WithTimeout(ctx, wait)
			defer cancel()
		}
		for len(s.ready) == 0 {
			if err := s.read(rctx); err != nil {
				if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
					return nil, nil // the wait ran out: no rows
				}
				return nil, err
			}
		}
	}
	if n < 0 || n > len(s.ready) {
		n = len(s.ready)
	}
	out := append([][]any(nil), s.ready[:n]...)
	clear(s.ready[:n])
	s.ready = s.ready[n:]
	return out, nil
}

// read polls once and appends the rows it brought to ready.
func (s *Subscription) read(ctx context.Context) error {
	pctx := ctx
	if len(s.pending) > 0 {
		var cancel context.CancelFunc
		pctx, cancel = context.WithTimeout(ctx, quietSnapshot)
		defer cancel()
	}
	recs, next, err := s.tail.Poll(pctx)
	if err != nil {
		if ctx.Err() == nil && len(s.pending) > 0 && errors.Is(err, context.DeadlineExceeded) {
			// Nothing more to read now: what was there has been read.
			s.endSnapshot()
			return nil
		}
		return err
	}
	if err := s.apply(recs); err != nil {
		return err
	}
	for p, n := range next {
		if end, ok := s.pending[p]; ok && n >= end {
			delete(s.pending, p)
			if len(s.pending) == 0 {
				s.endSnapshot()
			}
		}
	}
	return nil
}

// apply decodes records into rows: ready at once, or into the changelog
// of an upsert stream. Records that do not decode (a source's poison
// records) are passed over: the stream reading the source reports them.
func (s *Subscription) apply(recs []*kafkaio.Record) error {
	if len(recs) == 0 {
		return nil
	}
	values := make([][]byte, 0, len(recs))
	live := recs[:0:0]
	for _, r := range recs {
		if r.Value == nil {
			if s.upsert != nil {
				s.ready = append(s.ready, s.upsert.delete(r, s.snapshotting(r))...)
			}
			continue
		}
		values = append(values, r.Value)
		live = append(live, r)
	}
	if len(values) == 0 {
		return nil
	}
	rec, decoded, _ := s.dec.Decode(values)
	defer rec.Release()
	b := exec.BatchOf(rec, s.rel.Schema)
	dataflow.FillKafkaTime(s.rel, b, live, decoded)
	rows, err := exec.Project(b, s.exprs)
	if err != nil {
		return fmt.Errorf("subscribe to %s: %w", s.rel.Name, err)
	}
	for i, row := range rows {
		r := live[decoded[i]]
		switch {
		case s.upsert != nil:
			s.ready = append(s.ready, s.upsert.put(r, row, s.snapshotting(r))...)
		case s.addFinal:
			s.ready = append(s.ready, append(row, true))
		default:
			s.ready = append(s.ready, row)
		}
	}
	return nil
}

// snapshotting reports whether r belongs to the snapshot still being read.
func (s *Subscription) snapshotting(r *kafkaio.Record) bool {
	end, ok := s.pending[r.Partition]
	return ok && r.Offset < end
}

// endSnapshot is called once the snapshot is read: an upsert stream's
// current values are given now, if asked for.
func (s *Subscription) endSnapshot() {
	s.pending = nil
	if s.upsert != nil && s.emitSnapshot {
		s.ready = append(s.ready, s.upsert.current()...)
	}
}

// changelog is the current value of each key of an upsert stream, to turn
// its records into changes.
type changelog struct {
	// pk: the primary-key columns a row is identified by, when records
	// are keyed by message_key rather than by the group key (then several
	// groups share a record key). nil: the record key identifies a row.
	pk    []int
	rows  map[string][]any
	order []string // snapshot keys in order of first appearance (may repeat)
	key   []byte
}

func newChangelog(rel *catalog.Relation) *changelog {
	c := &changelog{rows: map[string][]any{}}
	if st := rel.Stream; st.Options.MessageKey != "" && len(st.PrimaryKey) > 0 {
		for _, k := range st.PrimaryKey {
			i := rel.Schema.Index(k)
			if i < 0 {
				c.pk = nil
				break
			}
			c.pk = append(c.pk, i)
		}
	}
	return c
}

func (c *changelog) identity(r *kafkaio.Record, row []any) string {
	if c.pk == nil || row == nil {
		return strconv.Itoa(int(r.Partition)) + "/" + string(r.Key)
	}
	c.key = c.key[:0]
	for _, i := range c.pk {
		c.key = fmt.Appendf(c.key, "%T:%v\x00", row[i], row[i])
	}
	return string(c.key)
}

// put records row as its key's value, and returns the changes to give
// (none while quiet: the snapshot is given whole at its end).
func (c *changelog) put(r *kafkaio.Record, row []any, quiet bool) [][]any {
	id := c.identity(r, row)
	old, had := c.rows[id]
	if had && sameRow(old, row) {
		return nil // written again unchanged (a redelivery): no change
	}
	if !had && quiet {
		c.order = append(c.order, id)
	}
	c.rows[id] = row
	if quiet {
		return nil
	}
	var out [][]any
	if had {
		out = append(out, withDiff(old, -1))
	}
	return append(out, withDiff(row, 1))
}

// delete handles a tombstone: the key's value is retracted.
func (c *changelog) delete(r *kafkaio.Record, quiet bool) [][]any {
	if c.pk != nil {
		// Keyed by message_key, a tombstone does not say which group
		// it ends; bounded reads ignore it too.
		return nil
	}
	id := c.identity(r, nil)
	old, had := c.rows[id]
	if !had {
		return nil
	}
	delete(c.rows, id)
	if quiet {
		return nil
	}
	return [][]any{withDiff(old, -1)}
}

// current is every key's value, each with diff +1, in the order the keys
// first appeared in the snapshot.
func (c *changelog) current() [][]any {
	var out [][]any
	given := map[string]bool{}
	for _, id := range c.order {
		if row, ok := c.rows[id]; ok && !given[id] {
			out = append(out, withDiff(row, 1))
			given[id] = true
		}
	}
	c.order = nil
	return out
}

func withDiff(row []any, d int64) []any {
	return append(append(make([]any, 0, len(row)+1), row...), d)
}

func sameRow(a, b []any) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if ta, ok := a[i].(time.Time); ok {
			tb, ok := b[i].(time.Time)
			if !ok || !ta.Equal(tb) {
				return false
			}
			continue
		}
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
