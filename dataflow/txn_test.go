package dataflow

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/turbinesql/turbinesql/kafkaio"
)

// TestProgressRoundTrip: the watermark a commit gave its operators, and
// the process that committed, come back from the offset's metadata.
func TestProgressRoundTrip(t *testing.T) {
	now := time.UnixMilli(1_796_000_000_123)
	wm := Watermark{WM: 42_000, Has: true, Idle: true, Now: now}
	got, holder, err := parseProgress(encodeProgress(wm, 7))
	if err != nil || got != wm || holder != 7 {
		t.Fatalf("parse(encode(%+v, 7)) = %+v, %d, %v", wm, got, holder, err)
	}
	if _, err := decodeProgress("something a tool wrote"); err == nil || errors.Is(err, errProgressVersion) {
		t.Fatalf("metadata that is not a progress: %v, want refused as not a progress", err)
	}
	// A newer release's progress is refused as such, even when its
	// fields look like this one's.
	newer := strings.Replace(encodeProgress(wm, 7), progressVersion, "turbine2", 1)
	if _, _, err := parseProgress(newer); !errors.Is(err, errProgressVersion) {
		t.Fatalf("progress %q: %v, want errProgressVersion", newer, err)
	}
}

// TestTakenOver: another holder's commit after the stream started here
// means another server runs it; this server's own commits, and another
// holder's commits from before (an earlier run of this server), do not.
func TestTakenOver(t *testing.T) {
	start := time.UnixMilli(1_796_000_000_000)
	at := func(holder uint64, d time.Duration) kafkaio.Committed {
		return kafkaio.Committed{Offset: 10, Metadata: encodeProgress(Watermark{Now: start.Add(d)}, holder)}
	}
	for _, tc := range []struct {
		name      string
		committed map[int32]kafkaio.Committed
		taken     bool
	}{
		{"own commits", map[int32]kafkaio.Committed{0: at(1, time.Second), 1: at(1, 2*time.Second)}, false},
		{"an earlier run's commit", map[int32]kafkaio.Committed{0: at(1, time.Second), 1: at(9, -time.Minute)}, false},
		{"another server since", map[int32]kafkaio.Committed{0: at(1, time.Second), 1: at(9, 3*time.Second)}, true},
		{"offsets of a tool", map[int32]kafkaio.Committed{0: {Offset: 3, Metadata: ""}}, false},
	} {
		if h, taken := TakenOver(tc.committed, 1, start); taken != tc.taken || taken && h != 9 {
			t.Errorf("%s: TakenOver = %d, %v; want taken %v", tc.name, h, taken, tc.taken)
		}
	}
}
