package audit

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestServerLogFigures: the figures the cluster mode takes from the
// servers' logs (slog text lines): fields, quoted or not, the line's time,
// the restore totals and the last line of a kind after a moment.
func TestServerLogFigures(t *testing.T) {
	lines := `time=2026-12-01T09:53:12.727Z level=INFO msg="state restored from the changelog" stage=hop_combine partition=0 records=5416 seconds=0.17 records_per_second=32717
time=2026-12-01T09:53:13.016Z level=INFO msg="partitions assigned" stage=hop_combine group=g partitions="[0 1 2 3]" owned=4
time=2026-12-01T09:53:14.000Z level=INFO msg="state restored from the changelog" stage=x partition=1 records=584 seconds=0.03 records_per_second=19466
time=2026-12-01T09:53:20.500Z level=INFO msg="partitions assigned" stage=x group=g2 partitions=[1] owned=1
`
	dir := t.TempDir()
	log := filepath.Join(dir, "server-1.log")
	if err := os.WriteFile(log, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	line := `time=2026-12-01T09:53:13.016Z level=INFO msg="partitions assigned" stage=hop_combine partitions="[0 1 2 3]" owned=4`
	for key, want := range map[string]string{"msg": "partitions assigned", "partitions": "[0 1 2 3]", "owned": "4", "stage": "hop_combine", "group": ""} {
		if got := logField(line, key); got != want {
			t.Errorf("logField(%q) = %q, want %q", key, got, want)
		}
	}
	c := &chaos{nodes: []*member{{cfg: serverConfig{logPath: log}}}}
	r := c.restores()
	if r.opens != 2 || r.records != 6000 || r.seconds < 0.199 || r.seconds > 0.201 || r.maxRecords != 5416 {
		t.Errorf("restores: %+v, want 2 opens, 6000 records in 0.20 s, largest 5416", r)
	}
	since := time.Date(2026, 12, 1, 9, 53, 13, 500_000_000, time.UTC)
	if got, want := lastLogged([]string{log}, "partitions assigned", since), since.Add(7*time.Second); !got.Equal(want) {
		t.Errorf("lastLogged = %s, want %s", got, want)
	}
	if got := lastLogged([]string{log}, "partitions assigned", since.Add(time.Minute)); !got.IsZero() {
		t.Errorf("lastLogged after the last line = %s, want none", got)
	}
}
