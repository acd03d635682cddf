package state

// Murmur2 is the hash of Kafka's Java client (Utils.murmur2), which its
// default partitioner uses to place keyed records. Placement and key groups
// must agree with it bit for bit, so this is a transcription, not a variant.
func Murmur2(data []byte) int32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	length := len(data)
	h := seed ^ uint32(length)
	n4 := length / 4
	for i := 0; i < n4; i++ {
		i4 := i * 4
		k := uint32(data[i4]) | uint32(data[i4+1])<<8 | uint32(data[i4+2])<<16 | uint32(data[i4+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	tail := length &^ 3
	switch length % 4 {
	case 3:
		h ^= uint32(data[tail+2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[tail+1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[tail])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// PositiveHash is Kafka's toPositive(murmur2(key)).
func PositiveHash(key []byte) uint32 { return uint32(Murmur2(key)) & 0x7fffffff }

// PartitionFor places a key on one of n partitions as Kafka's Java client does.
func PartitionFor(key []byte, n int) int32 { return int32(PositiveHash(key) % uint32(n)) }
