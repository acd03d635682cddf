package console

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

type fakeSource struct{ streams []Stream }

func (f *fakeSource) Streams() []Stream { return f.streams }
func (f *fakeSource) Topology(name string) (*Topology, bool) {
	for _, s := range f.streams {
		if s.Name == name {
			return &Topology{Stream: name, Status: s.Status, Nodes: []Node{{Kind: KindSource, Title: "source " + s.Input}}}, true
		}
	}
	return nil, false
}
func (f *fakeSource) Partitions() []Partition { return nil }
func (f *fakeSource) Sources() []SourceInfo {
	return []SourceInfo{{Name: "clicks", Topic: "clicks", Columns: []Column{{Name: "user_id", Type: "TEXT"}}, Partitions: []SourcePartition{{Partition: 0, Records: 5}}}}
}
func (f *fakeSource) Members() []Member {
	return []Member{{Node: "n1", PGAddr: "127.0.0.1:5433", HTTPAddr: "127.0.0.1:9464", TasksOwned: 3, State: "up", This: true}}
}

func get(t *testing.T, h http.Handler, path string) (int, string, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	b, _ := io.ReadAll(rec.Body)
	return rec.Code, rec.Header().Get("Content-Type"), string(b)
}

// TestHandler checks the routes: pages with their data embedded as
// escaped JSON and ordinary links, JSON endpoints, assets from the binary,
// and 404s.
func TestHandler(t *testing.T) {
	src := &fakeSource{streams: []Stream{{Name: "per_user", Input: "clicks", Status: "running"}, {Name: "x</script><b>", Status: "failed"}}}
	h := Handler(src)

	code, ct, body := get(t, h, "/")
	if code != 200 || !strings.HasPrefix(ct, "text/html") {
		t.Fatalf("/: %d %s", code, ct)
	}
	for _, want := range []string{`href="/partitions"`, `href="/sources"`, `href="/"`, `data-api="/api/streams"`, `"per_user"`, `src="/assets/console.js"`} {
		if !strings.Contains(body, want) {
			t.Errorf("/ lacks %s", want)
		}
	}
	if strings.Contains(body, "x</script>") {
		t.Error("a name ended the data script: not escaped")
	}

	code, ct, body = get(t, h, "/api/streams")
	var got []Stream
	if code != 200 || ct != "application/json" || json.Unmarshal([]byte(body), &got) != nil || len(got) != 2 || got[1].Name != "x</script><b>" {
		t.Fatalf("/api/streams: %d %s %s", code, ct, body)
	}
	if code, _, body = get(t, h, "/api/topology?stream=per_user"); code != 200 || !strings.Contains(body, `"source clicks"`) {
		t.Fatalf("/api/topology: %d %s", code, body)
	}
	if code, _, _ = get(t, h, "/api/topology?stream=nope"); code != 404 {
		t.Fatalf("unknown stream's topology: %d", code)
	}
	if code, _, body = get(t, h, "/topology?stream=nope"); code != 404 || !strings.Contains(body, "no such stream") {
		t.Fatalf("unknown stream's page: %d", code)
	}
	if code, _, body = get(t, h, "/topology?stream=per_user"); code != 200 || !strings.Contains(body, `data-api="/api/topology?stream=per_user"`) {
		t.Fatalf("topology page: %d %s", code, body)
	}
	if code, _, body = get(t, h, "/cluster"); code != 200 || !strings.Contains(body, `data-api="/api/cluster"`) || !strings.Contains(body, `"n1"`) {
		t.Fatalf("cluster page: %d %s", code, body)
	}
	if code, _, body = get(t, h, "/sources"); code != 200 || !strings.Contains(body, `data-api="/api/sources"`) || !strings.Contains(body, `"user_id"`) {
		t.Fatalf("sources page: %d %s", code, body)
	}
	var sources []SourceInfo
	if code, _, body = get(t, h, "/api/sources"); code != 200 || json.Unmarshal([]byte(body), &sources) != nil || len(sources) != 1 || sources[0].Partitions[0].Records != 5 {
		t.Fatalf("/api/sources: %d %s", code, body)
	}
	var members []Member
	if code, _, body = get(t, h, "/api/cluster"); code != 200 || json.Unmarshal([]byte(body), &members) != nil || len(members) != 1 || members[0].TasksOwned != 3 {
		t.Fatalf("/api/cluster: %d %s", code, body)
	}
	if code, ct, body = get(t, h, "/assets/console.js"); code != 200 || !strings.Contains(body, "setInterval") {
		t.Fatalf("console.js: %d %s", code, ct)
	}
	if strings.Contains(body, "http://") && !strings.Contains(body, "http://www.w3.org/2000/svg") {
		t.Error("console.js loads something from the network")
	}
	if code, _, _ = get(t, h, "/nothing"); code != 404 {
		t.Fatalf("/nothing: %d", code)
	}
}

func TestRates(t *testing.T) {
	var r Rates
	t0 := time.Unix(1000, 0)
	if got := r.Rate("a", 10, t0); got != 0 {
		t.Fatalf("first sample: %v", got)
	}
	if got := r.Rate("a", 20, t0.Add(500*time.Millisecond)); got != 0 {
		t.Fatalf("too soon: %v", got)
	}
	if got := r.Rate("a", 30, t0.Add(2*time.Second)); got != 10 {
		t.Fatalf("rate %v, want 10/s", got)
	}
	if got := r.Rate("a", 40, t0.Add(2500*time.Millisecond)); got != 10 {
		t.Fatalf("within a second the last rate stands: %v", got)
	}
	if got := r.Rate("a", 5, t0.Add(5*time.Second)); got != 0 {
		t.Fatalf("a counter reset: %v", got)
	}
}
