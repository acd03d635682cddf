package exec

import (
	"encoding/binary"
	"errors"
)

func appendLen(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

var errShort = errors.New("exec: truncated encoding")

func readLen(b []byte) (part, rest []byte, err error) {
	l, n := binary.Uvarint(b)
	if n <= 0 || uint64(len(b)-n) < l {
		return nil, nil, errShort
	}
	return b[n : n+int(l)], b[n+int(l):], nil
}
