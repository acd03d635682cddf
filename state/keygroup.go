package state

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"sort"
)

// KeyGroups is the number of key groups keyed state is split into. Partition
// p of N owns the groups g with g mod N == p; when N divides 960 those are
// exactly the keys Kafka delivers to p, because (h mod 960) mod N == h mod N.
const KeyGroups = 960

// KeyGroup is the key group of a partition-key value (its UTF-8 text; an
// integer in decimal).
func KeyGroup(key []byte) uint16 { return uint16(PositiveHash(key) % KeyGroups) }

// OwnerOf is the partition of n that owns key group g.
func OwnerOf(g uint16, n int) int32 { return int32(int(g) % n) }

// Divides reports whether a partition count of n splits the key groups
// evenly (n divides 960): the counts keyed state can run and rescale on.
func Divides(n int) bool { return n > 0 && KeyGroups%n == 0 }

// ValidCounts lists the partition counts that divide 960.
func ValidCounts() []int {
	var out []int
	for n := 1; n <= KeyGroups; n++ {
		if Divides(n) {
			out = append(out, n)
		}
	}
	return out
}

// NearestValid returns the closest valid counts below and above n (one of
// them is 0 when there is none on that side).
func NearestValid(n int) (below, above int) {
	vs := ValidCounts()
	i := sort.SearchInts(vs, n)
	if i < len(vs) {
		above = vs[i]
	}
	if i > 0 {
		below = vs[i-1]
	}
	return below, above
}

// DivisorError explains a partition count that does not divide 960.
type DivisorError struct {
	Topic  string
	Count  int
	Option string // the option that sets the count, for internal topics
}

func (e *DivisorError) Error() string {
	return fmt.Sprintf("topic %q has %d partitions, which does not divide 960: keyed state on it could be rescaled only back to a count that divides 960 (closest valid counts: %s); %s, or set TURBINE_ALLOW_NON_DIVISOR_PARTITIONS=1 to start anyway",
		e.Topic, e.Count, ClosestValid(e.Count), e.Remedy())
}

// Warning says the same of a start that goes ahead anyway
// (TURBINE_ALLOW_NON_DIVISOR_PARTITIONS=1); Remedy is the way back.
func (e *DivisorError) Warning() string {
	return fmt.Sprintf("topic %q has %d partitions, which does not divide 960: keyed state on it can be rescaled only to a count that divides 960 (closest valid counts: %s)",
		e.Topic, e.Count, ClosestValid(e.Count))
}

// Remedy says how to reach a valid count: the option that sets an
// internal topic's count, else a new topic.
func (e *DivisorError) Remedy() string {
	if e.Option != "" {
		return "set " + e.Option + " to a valid count"
	}
	return "recreate the topic with a valid count"
}

// ClosestValid names the valid counts nearest n: "8 and 10", or the one
// there is when n is beyond every valid count.
func ClosestValid(n int) string {
	below, above := NearestValid(n)
	switch {
	case below > 0 && above > 0:
		return fmt.Sprintf("%d and %d", below, above)
	case below > 0:
		return fmt.Sprint(below)
	default:
		return fmt.Sprint(above)
	}
}

// CheckDivisor returns a *DivisorError when n does not divide 960.
func CheckDivisor(topic string, n int, option string) error {
	if Divides(n) {
		return nil
	}
	return &DivisorError{Topic: topic, Count: n, Option: option}
}

// A key's group is murmur2(key) mod 960 on every partition count. On a
// count that does not divide 960 (started with
// TURBINE_ALLOW_NON_DIVISOR_PARTITIONS=1) a partition receives keys of
// every group, so its groups no longer say which keys it holds; but a
// key's group does not depend on the count, so after a change of count a
// key that stayed on its partition finds its state there under the same
// group, and once the count divides 960 again "the groups p does not own"
// are once more exactly the keys that moved away from p. (Before this,
// such a count grouped state by hash mod N, which a lookup under the next
// count, by hash mod 960, never found: every key lost its state.)

// OwnedCount is len(OwnedGroups(p, n)), without building the list.
func OwnedCount(p int32, n int) int {
	if n <= 0 || int(p) >= KeyGroups {
		return 0
	}
	return (KeyGroups-1-int(p))/n + 1
}

// OwnedGroups lists, ascending, the key groups partition p of n owns
// (g mod n == p): on a count that does not divide 960 these are not the
// keys p receives.
func OwnedGroups(p int32, n int) []uint16 {
	var out []uint16
	for g := int(p); g < KeyGroups; g += n {
		out = append(out, uint16(g))
	}
	return out
}

// IntGroups sets dst[i] to the key group of the integer partition key
// vals[i] (whose text is its decimal), for each i < len(dst); a NULL
// (null[i]) gets NullGroup. It is KeyGroup over a column: each key's digits are made eight at a time in a
// buffer on the stack (decimal) instead of by strconv two at a time into
// an appended slice. At 10^7 keys, where each row of a cold window needs
// its key group, that was 7% of the ingest's CPU, and this is half.
func IntGroups(dst []uint16, vals []int64, null []bool) {
	var buf [24]byte
	for i := range dst {
		if null != nil && null[i] {
			dst[i] = NullGroup
			continue
		}
		z := decimal(&buf, vals[i])
		dst[i] = uint16(PositiveHash(buf[z:]) % KeyGroups)
	}
}

// decimal writes v in decimal (as strconv.FormatInt) at the end of buf
// and returns where it starts.
func decimal(buf *[24]byte, v int64) int {
	u := uint64(v)
	if v < 0 {
		u = -u // MinInt64 too: its magnitude as a uint64
	}
	const zeros = 0x3030303030303030 // eight ASCII '0's
	var z int
	if u < 1e8 {
		d := eightDigits(uint32(u))
		binary.LittleEndian.PutUint64(buf[16:], d)
		z = 16 + min(bits.TrailingZeros64(d^zeros)/8, 7) // 0 keeps one digit
	} else {
		hi, lo := u/1e16, u%1e16 // hi < 1e4
		binary.LittleEndian.PutUint64(buf[0:], eightDigits(uint32(hi)))
		binary.LittleEndian.PutUint64(buf[8:], eightDigits(uint32(lo/1e8)))
		binary.LittleEndian.PutUint64(buf[16:], eightDigits(uint32(lo%1e8)))
		if w := binary.LittleEndian.Uint64(buf[0:]) ^ zeros; w != 0 {
			z = bits.TrailingZeros64(w) / 8
		} else {
			z = 8 + bits.TrailingZeros64(binary.LittleEndian.Uint64(buf[8:])^zeros)/8
		}
	}
	if v < 0 {
		z--
		buf[z] = '-'
	}
	return z
}

// eightDigits is x (< 10^8) as eight ASCII digits, zero-padded, the first
// in the lowest byte: x is split into halves of four digits, each into
// two of two, each into two digits, every split done on all lanes at once
// by a multiplication (x/100 as x*10486>>20 and x/10 as x*103>>10, exact
// for the lanes' ranges).
func eightDigits(x uint32) uint64 {
	t := uint64(x/10000) | uint64(x%10000)<<32
	h := (t * 10486 >> 20) & 0x0000007F0000007F
	t = (t-h*100)<<16 | h
	h = (t * 103 >> 10) & 0x000F000F000F000F
	t = (t-h*10)<<8 | h
	return t | 0x3030303030303030
}
