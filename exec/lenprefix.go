package exec

import (
	"encoding/binary"
	"errors"

	"github.com/turbinesql/turbinesql/agg"
)

func appendLen(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// appendEncoded appends f's encoding of slot s, prefixed with its length
// as appendLen does, encoded in place (a byte reserved for the length, the
// encoding moved only when its length takes more): no scratch copy, per
// group of a commit.
func appendEncoded(dst []byte, f agg.Func, s uint32) []byte {
	at := len(dst)
	dst = f.Encode(append(dst, 0), s)
	n := len(dst) - at - 1
	if n < 0x80 {
		dst[at] = byte(n)
		return dst
	}
	var pre [binary.MaxVarintLen64]byte
	p := binary.PutUvarint(pre[:], uint64(n))
	dst = append(dst, pre[:p-1]...) // room for the longer prefix
	copy(dst[at+p:], dst[at+1:at+1+n])
	copy(dst[at:], pre[:p])
	return dst
}

var errShort = errors.New("exec: truncated encoding")

func readLen(b []byte) (part, rest []byte, err error) {
	l, n := binary.Uvarint(b)
	if n <= 0 || uint64(len(b)-n) < l {
		return nil, nil, errShort
	}
	return b[n : n+int(l)], b[n+int(l):], nil
}
