package dataflow

import (
	"errors"
	"strings"
	"testing"
	"time"
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
