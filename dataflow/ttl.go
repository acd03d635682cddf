package dataflow

import (
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/turbinesql/turbinesql/exec"
)

// state_ttl: an upsert stream's groups otherwise live forever. With a TTL
// each stored group carries when it last changed (groupCache.stamp), and
// a sweep at a commit every TTL/4 (at most once a second) reads the
// task's groups in Pebble in order, forgets those not changed for the TTL
// (in memory and, at that commit, in Pebble) and emits a tombstone for
// each one's key, so the output topic forgets it too. A group changed
// since the last commit is not expired: the commit stamps it anew. Expiry
// is processing time, so it needs no event time in the input; it is
// checked at sweeps, so a group goes between TTL and 1.25 x TTL after its
// last change.

// sweepEvery is how often a TTL sweep runs.
func sweepEvery(ttl time.Duration) time.Duration { return max(ttl/4, time.Second) }

// sweep expires the groups last changed TTL or longer before now and
// returns their Kafka keys.
func (h *HashAgg) sweep(now time.Time) ([][]byte, error) {
	cutoff := now.Add(-h.StateTTL).UnixMilli()
	scan := h.cache.pending.ScanWindow(exec.NoWindow, h.cache.groups)
	var keys [][]byte
	for {
		kg, key, val, ok := scan.Next()
		if !ok {
			break
		}
		at, n := binary.Uvarint(val)
		if n <= 0 {
			scan.Close()
			return nil, fmt.Errorf("state of %s: a stored group has no time stamp", h.env.State)
		}
		if int64(at) > cutoff || !h.agg.ExpireGroup(key) {
			continue
		}
		key = slices.Clone(key)
		h.expired = append(h.expired, exec.StateRef{KG: kg, Key: key, Window: exec.NoWindow})
		keys = append(keys, key)
	}
	if err := scan.Close(); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, nil
	}
	b, err := h.agg.KeyColumns(keys)
	if err != nil {
		return nil, err
	}
	h.env.Metrics.ExpiredGroups.WithLabelValues(h.env.Name).Add(float64(len(keys)))
	return h.groupKeys(b), nil
}
