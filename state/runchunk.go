package state

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// A run (runs.go) stores its partials in chunks: one table entry holds up
// to chunkBytes of consecutive partials of one key group, prefix-coded.
// An entry per partial cost Pebble's table writer ~280 ns each (a block
// entry, its shared-prefix search, index and property bookkeeping): at
// 10^7 keys, a sixth of the ingest's CPU. A chunk is appended to a buffer
// at a few ns a partial, and the close reads it without a Pebble
// iterator step per partial.
//
// A chunk's key is its first partial's run key with the plain key group
// in place of the partial's stored one:
//
//	(scope, window, runKG, run id, key group, first key, first delta id)
//
// so the chunks of a run are in the order of their partials, and every
// reader that picks a run's entries by key group (rescale's deletions)
// reads the group where it always was (realKG of a plain key group is
// itself). A partial's stored key group is deltaKG's (0x8000|kg, or
// nullDeltaKG), never a plain one: the key group alone tells a chunk from
// a partial, so runs written before chunks (and a standby's runs, rebuilt
// from the changelog) read as they always did.
//
// Chunks are local to a disk. The changelog carries each partial under
// its own run key, as before chunks (expandChunk): a standby, a node of
// the previous release and the rescale tool read the changelog as they
// always have. Deleting a chunk logs a tombstone for each of its partials.
//
// A chunk's value: a version byte, then per partial
//
//	uvarint shared, uvarint n, the key's bytes after the shared ones (n),
//	the delta id (coded: see below), uvarint len(val), val
//
// where shared is the length of the prefix the key has in common with the
// previous partial's (0 for the first). In version 2 the id is coded
// against the previous partial's (the first's against (0, 0)): a uvarint
// 2*zigzag(Seq - previous Seq) when Gen is the previous one's, else 1
// followed by Gen and Seq (8 bytes each, as in keys). A commit's partials
// share their Gen and, written in key order, take consecutive Seqs: the id
// takes a byte where it took 16, and a partial about half the bytes. So
// run tables are not compressed (see Store's runOpts). Version 1 (the id's
// 16 bytes as in keys) is still read: a node's disk may hold it.
const (
	chunkVersion1 = 1
	chunkVersion  = 2
	// chunkBytes ends a chunk: the close holds one chunk of each run in
	// memory at a time.
	chunkBytes = 16 << 10
)

// isChunkKG reports whether the key group of a run entry (after the run
// id) is a chunk's: a plain key group, where a partial has deltaKG's.
func isChunkKG(stored uint16) bool { return !isDeltaKG(stored) }

// chunkWriter builds one chunk at a time.
type chunkWriter struct {
	kg   uint16 // the chunk's key group (plain); valid while n > 0
	n    int
	key  []byte // the chunk's table key
	val  []byte
	prev []byte // the last partial's key
	// gen and seq are the last partial's id.
	gen, seq uint64
	flush    func(key, val []byte) error
}

// add appends a partial of group (kg, key) with id idb (16 bytes); pre is
// the run's prefix (runPrefix), used when a chunk starts.
func (c *chunkWriter) add(pre []byte, kg uint16, key, idb, val []byte) error {
	if c.n > 0 && (kg != c.kg || len(c.val) >= chunkBytes) {
		if err := c.finish(); err != nil {
			return err
		}
	}
	if c.n == 0 {
		c.kg = kg
		c.key = append(append(binary.BigEndian.AppendUint16(append(c.key[:0], pre...), kg), key...), idb...)
		c.val = append(c.val[:0], chunkVersion)
		c.prev = c.prev[:0]
		c.gen, c.seq = 0, 0
	}
	shared := 0
	for shared < len(key) && shared < len(c.prev) && key[shared] == c.prev[shared] {
		shared++
	}
	c.val = binary.AppendUvarint(c.val, uint64(shared))
	c.val = binary.AppendUvarint(c.val, uint64(len(key)-shared))
	c.val = append(c.val, key[shared:]...)
	c.val = c.appendID(c.val, idb)
	c.val = binary.AppendUvarint(c.val, uint64(len(val)))
	c.val = append(c.val, val...)
	c.prev = append(c.prev[:0], key...)
	c.n++
	return nil
}

// appendID codes id idb (16 bytes, as in keys) against the last one.
func (c *chunkWriter) appendID(dst, idb []byte) []byte {
	gen, seq := binary.BigEndian.Uint64(idb), binary.BigEndian.Uint64(idb[8:])
	d := int64(seq - c.seq)
	zz := uint64(d<<1) ^ uint64(d>>63)
	if gen == c.gen && zz < 1<<63 {
		dst = binary.AppendUvarint(dst, zz<<1)
	} else {
		dst = append(append(dst, 1), idb...)
	}
	c.gen, c.seq = gen, seq
	return dst
}

// finish writes the chunk being built, if any.
func (c *chunkWriter) finish() error {
	if c.n == 0 {
		return nil
	}
	c.n = 0
	return c.flush(c.key, c.val)
}

// chunkReader walks a chunk's partials; key, id and val are valid until
// the next call of next (key and id are its own buffers, val in the
// chunk).
type chunkReader struct {
	version  byte
	rest     []byte
	key      []byte
	id, val  []byte
	gen, seq uint64
	idBuf    [deltaIDLen]byte
}

// reset starts reading chunk value v.
func (r *chunkReader) reset(v []byte) error {
	if len(v) == 0 || (v[0] != chunkVersion && v[0] != chunkVersion1) {
		return fmt.Errorf("%w: run chunk of an unknown version", errCorruptKey)
	}
	r.version, r.rest, r.key = v[0], v[1:], r.key[:0]
	r.gen, r.seq = 0, 0
	return nil
}

// next moves to the chunk's next partial: false at its end.
func (r *chunkReader) next() (bool, error) {
	if len(r.rest) == 0 {
		return false, nil
	}
	b := r.rest
	shared, n1 := binary.Uvarint(b)
	if n1 <= 0 || shared > uint64(len(r.key)) {
		return false, errCorruptKey
	}
	b = b[n1:]
	n, n2 := binary.Uvarint(b)
	if n2 <= 0 || n > uint64(len(b)-n2) {
		return false, errCorruptKey
	}
	b = b[n2:]
	r.key = append(r.key[:shared], b[:n]...)
	b = b[n:]
	var err error
	if b, err = r.readID(b); err != nil {
		return false, err
	}
	vn, n3 := binary.Uvarint(b)
	if n3 <= 0 || vn > uint64(len(b)-n3) {
		return false, errCorruptKey
	}
	b = b[n3:]
	r.val, r.rest = b[:vn], b[vn:]
	return true, nil
}

// readID reads a partial's id from b (see appendID) into r.id and returns
// what follows it.
func (r *chunkReader) readID(b []byte) ([]byte, error) {
	if r.version == chunkVersion1 {
		if len(b) < deltaIDLen {
			return nil, errCorruptKey
		}
		r.id = b[:deltaIDLen]
		return b[deltaIDLen:], nil
	}
	h, n := binary.Uvarint(b)
	if n <= 0 {
		return nil, errCorruptKey
	}
	b = b[n:]
	switch {
	case h == 1:
		if len(b) < deltaIDLen {
			return nil, errCorruptKey
		}
		r.gen, r.seq = binary.BigEndian.Uint64(b), binary.BigEndian.Uint64(b[8:])
		b = b[deltaIDLen:]
	case h&1 == 0:
		zz := h >> 1
		r.seq += uint64(int64(zz>>1) ^ -int64(zz&1))
	default:
		return nil, errCorruptKey
	}
	binary.BigEndian.PutUint64(r.idBuf[:], r.gen)
	binary.BigEndian.PutUint64(r.idBuf[8:], r.seq)
	r.id = r.idBuf[:]
	return b, nil
}

// chunkAt reports whether k, an entry of a run under runs prefix length
// pl (where the run id ends: the entry's key group follows), is a chunk.
func chunkAt(k []byte, pl int) bool {
	return len(k) >= pl+2+deltaIDLen && isChunkKG(binary.BigEndian.Uint16(k[pl:]))
}

// expandChunk calls fn with the run key and value of each partial of
// chunk (k, v): the key a partial of the run would have had without
// chunks, which is what the changelog carries.
func expandChunk(k, v []byte, fn func(key, val []byte) error) error {
	var r chunkReader
	if err := r.reset(v); err != nil {
		return err
	}
	ok, err := r.next()
	if err != nil || !ok {
		if err == nil {
			err = errCorruptKey // a chunk holds at least one partial
		}
		return err
	}
	// The chunk's key ends with (key group, first key, first id).
	pl := len(k) - deltaIDLen - len(r.key) - 2
	if pl < 0 || !bytes.Equal(k[pl+2:len(k)-deltaIDLen], r.key) {
		return errCorruptKey
	}
	kg := deltaKG(binary.BigEndian.Uint16(k[pl:]))
	kbuf := binary.BigEndian.AppendUint16(append([]byte(nil), k[:pl]...), kg)
	for ok {
		kbuf = append(append(kbuf[:pl+2], r.key...), r.id...)
		if err := fn(kbuf, r.val); err != nil {
			return err
		}
		if ok, err = r.next(); err != nil {
			return err
		}
	}
	return nil
}

// eachPartialOf calls fn with each partial run key of run entry (k, v) of
// a run under prefix length pl: the chunk's partials, or the entry itself.
func eachPartialOf(k, v []byte, pl int, fn func(key, val []byte) error) error {
	if chunkAt(k, pl) {
		return expandChunk(k, v, fn)
	}
	return fn(k, v)
}

// runEntryIn is where the key group of k starts when k is an entry (not
// the marker) of a run of scope; -1 when it is not one.
func runEntryIn(k []byte, scope string) int {
	pl := 1 + len(scope) + 1 // prefixGroup, scope, 0
	if len(k) < pl+8+2+8+2 || k[0] != prefixGroup || k[pl-1] != 0 || string(k[1:pl-1]) != scope ||
		binary.BigEndian.Uint16(k[pl+8:]) != runKG {
		return -1
	}
	return pl + 8 + 2 + 8
}

// deleteChunk deletes run chunk k, noting it for the changelog
// (eachChange), which logs the deletion of each of its partials. v is its
// value when the chunk is in one of the batch's own runs (not yet in the
// store; the batch keeps v), nil when it is stored: it is read back when
// logged, so a deletion of many chunks holds only their keys.
func (b *Batch) deleteChunk(k, v []byte) error {
	if b.chunkDels == nil {
		b.chunkDels = map[string][]byte{}
	}
	b.chunkDels[string(k)] = v
	return b.b.Delete(k, nil)
}

// deletedChunk is the value of chunk k the batch deletes (deleteChunk).
func (b *Batch) deletedChunk(k []byte) ([]byte, error) {
	if v := b.chunkDels[string(k)]; v != nil {
		return v, nil
	}
	v, closer, err := b.s.db.Get(k)
	if err != nil {
		return nil, fmt.Errorf("log the deletion of a run chunk: %w", err)
	}
	defer closer.Close()
	return bytes.Clone(v), nil
}

// chunkLen is the number of partials in chunk value v.
func chunkLen(v []byte) (int, error) {
	var r chunkReader
	if err := r.reset(v); err != nil {
		return 0, err
	}
	n := 0
	for {
		ok, err := r.next()
		if err != nil || !ok {
			return n, err
		}
		n++
	}
}
