package audit

import (
	"cmp"
	"slices"
)

// The independent computation: what each stream must have emitted, from
// the produced rows alone, with none of the engine's code. Windows are
// [start, end), aligned to the epoch; a window is closed (its final pane
// due) once the watermark reaches its end.

// paneID names a pane: its key and window (start and end; both zero for
// an upsert stream's key).
type paneID struct {
	key        string
	start, end int64
}

// value is what the audit compares: COUNT(*) and SUM(v).
type value struct{ n, total int64 }

// expected computes every pane s must emit once the watermark reaches wm:
// for windowed streams every window that closed, for an upsert stream the
// final value of every key.
func expected(s streamSpec, rows []row, wm int64) map[paneID]value {
	key := func(r row) string {
		if s.keyCol() == "tenant" {
			return r.tenant
		}
		return r.user
	}
	out := map[paneID]value{}
	add := func(id paneID, v int64) {
		a := out[id]
		a.n++
		a.total += v
		out[id] = a
	}
	switch s.kind {
	case upsert:
		for _, r := range rows {
			add(paneID{key: key(r)}, r.v)
		}
		return out
	case tumble, emit:
		for _, r := range rows {
			w := floorTo(r.ts, tumbleMs)
			add(paneID{key(r), w, w + tumbleMs}, r.v)
		}
	case hop:
		for _, r := range rows {
			for w := floorTo(r.ts, hopSlide); w > r.ts-hopSize; w -= hopSlide {
				add(paneID{key(r), w, w + hopSize}, r.v)
			}
		}
	case session:
		for id, v := range sessions(rows, key) {
			out[id] = v
		}
	}
	for id := range out {
		if id.end > wm {
			delete(out, id) // still open
		}
	}
	return out
}

// sessions merges each key's rows into sessions: a row at t covers
// [t, t+gap), and rows whose intervals overlap (strictly: touching ends
// do not merge) are one session, from its first row to its last + gap.
func sessions(rows []row, key func(row) string) map[paneID]value {
	byKey := map[string][]row{}
	for _, r := range rows {
		byKey[key(r)] = append(byKey[key(r)], r)
	}
	out := map[paneID]value{}
	for k, rs := range byKey {
		slices.SortFunc(rs, func(a, b row) int { return cmp.Compare(a.ts, b.ts) })
		var cur paneID
		var v value
		for i, r := range rs {
			if i > 0 && r.ts >= cur.end {
				out[cur] = v
				v = value{}
			}
			if i == 0 || r.ts >= cur.end {
				cur = paneID{key: k, start: r.ts}
			}
			cur.end = max(cur.end, r.ts+sessionMs)
			v.n++
			v.total += r.v
		}
		out[cur] = v
	}
	return out
}

// floorTo rounds ts down to a multiple of size, negative ts included.
func floorTo(ts, size int64) int64 {
	w := ts - ts%size
	if ts%size < 0 {
		w -= size
	}
	return w
}
