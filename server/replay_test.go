package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// readyz fetches /readyz: the status code and the names of what is not
// ready.
func readyz(t *testing.T, srv *Server) (int, []notReady) {
	t.Helper()
	resp, err := http.Get("http://" + srv.HTTPAddr() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out struct {
		Status   string     `json:"status"`
		NotReady []notReady `json:"not_ready"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("/readyz body %q: %v", body, err)
	}
	if (resp.StatusCode == http.StatusOK) != (out.Status == "ready") {
		t.Fatalf("/readyz %d with status %q", resp.StatusCode, out.Status)
	}
	return resp.StatusCode, out.NotReady
}

// TestCatalogReplaySurvivesBadRecords: records written into the catalog
// topic by someone else (garbage, a statement for another key, a source
// over an internal topic) are skipped at start, the objects they name are
// marked failed (SHOW STREAMS, /readyz), the rest of the catalog is
// restored, and DROP removes a failed object's record.
func TestCatalogReplaySurvivesBadRecords(t *testing.T) {
	parallel(t)
	dir := t.TempDir()
	srv := startTestServer(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if resp, err := http.Get("http://" + srv.HTTPAddr() + "/healthz"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/healthz: %v %v", resp, err)
	}
	conn := connect(ctx, t, srv)
	for _, s := range []string{
		"CREATE SOURCE ev (k TEXT, n BIGINT) WITH (topic = 'ev', partitions = 2)",
		"CREATE STREAM ok_stream WITH (topic = 'ok_out') AS SELECT k, n FROM ev",
		"INSERT INTO ev VALUES ('a', 1)",
		"FLUSH",
	} {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for code, nr := readyz(t, srv); code != 200; code, nr = readyz(t, srv) {
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not ready with a running stream: %+v", nr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	conn.Close(ctx)

	// What the user did: write into the catalog topic directly.
	topic := "turbine-slt-catalog"
	bad := []*kgo.Record{
		{Topic: topic, Key: []byte("k1"), Value: []byte(`{"k":"k1","x":"boom"}`)},
		{Topic: topic, Key: []byte("stream/junk"), Value: []byte("this is not SQL")},
		{Topic: topic, Key: []byte("stream/liar"), Value: []byte("CREATE SOURCE other (a TEXT)")},
		{Topic: topic, Key: []byte("source/sneaky"), Value: []byte("CREATE SOURCE sneaky (a TEXT) WITH (topic = 'turbine-slt-catalog')")},
		{Topic: topic, Key: []byte("stream/orphan"), Value: []byte("CREATE STREAM orphan WITH (topic = 'o') AS SELECT a FROM sneaky")},
	}
	if err := srv.kafka.ProduceSync(ctx, bad); err != nil {
		t.Fatal(err)
	}
	srv.Close()

	srv = startTestServer(t, dir)
	defer func() { srv.Close() }()
	conn = connect(ctx, t, srv)
	defer conn.Close(ctx)
	res, err := conn.Exec(ctx, "FLUSH")
	if err != nil {
		t.Fatalf("FLUSH after a replay with bad records: %v (%s)", err, res)
	}
	status := map[string]string{}
	r, err := conn.Query(ctx, "SHOW STREAMS")
	if err != nil {
		t.Fatal(err)
	}
	for r.Next() {
		vals, err := r.Values()
		if err != nil {
			t.Fatal(err)
		}
		status[vals[0].(string)] = vals[4].(string)
	}
	r.Close()
	for name, want := range map[string]string{"ok_stream": "running", "junk": "failed", "liar": "failed", "orphan": "failed"} {
		if status[name] != want {
			t.Errorf("SHOW STREAMS: %s is %q, want %q (all: %v)", name, status[name], want, status)
		}
	}
	code, nr := readyz(t, srv)
	if code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz %d with failed objects", code)
	}
	var names []string
	for _, n := range nr {
		names = append(names, n.What)
	}
	if got := strings.Join(names, ","); got != "source sneaky,stream junk,stream liar,stream orphan" {
		t.Fatalf("/readyz names %q", got)
	}
	// The sound part of the catalog is back and works.
	var n int64
	if err := conn.QueryRow(ctx, "SELECT COUNT(*) FROM ok_stream").Scan(&n); err != nil || n != 1 {
		t.Fatalf("restored stream output: %d, %v", n, err)
	}
	for _, s := range []string{"DROP STREAM orphan", "DROP STREAM junk", "DROP STREAM liar", "DROP SOURCE sneaky"} {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	if code, nr := readyz(t, srv); code != 200 {
		t.Fatalf("/readyz after dropping the failed objects: %d %+v", code, nr)
	}
	// The tombstones stick: the next start has nothing failed.
	srv.Close()
	srv = startTestServer(t, dir)
	if code, nr := readyz(t, srv); code != 200 {
		deadline := time.Now().Add(30 * time.Second)
		for code != 200 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
			code, nr = readyz(t, srv)
		}
		if code != 200 {
			t.Fatalf("/readyz after restart: %d %+v", code, nr)
		}
	}
}
