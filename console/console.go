// Package console serves the web console at / on the HTTP address: a
// Streams page, a Topology page per stream (source → hop → aggregate →
// sink, the hop's internal topic and per-partition output distribution,
// the null-keys counter) and a Partitions page. Everything is embedded in
// the binary (no CDN: the machines may have no internet). Pages render
// from JSON the server embeds at load and then poll the same JSON
// endpoints, so they stay current without a reload; every name and number
// is text in the DOM (HTML, and SVG text in the bar chart), and pages link
// to each other with ordinary hrefs.
//
// It knows nothing of streams: a Source supplies the figures.
package console

import (
	"embed"
	"encoding/json"
	"html/template"
	"io/fs"
	"net/http"
	"sync"
	"time"
)

// Source supplies what the console shows.
type Source interface {
	Streams() []Stream
	// Topology of one stream; false when there is no such stream.
	Topology(name string) (*Topology, bool)
	Partitions() []Partition
	// Members are the live processes of the app (SHOW CLUSTER).
	Members() []Member
}

// Member is one row of the Cluster page.
type Member struct {
	Node         string `json:"node"`
	PGAddr       string `json:"pg_addr"`
	HTTPAddr     string `json:"http_addr"`
	TasksOwned   int    `json:"tasks_owned"`
	TasksStandby int    `json:"tasks_standby"`
	State        string `json:"state"`
	This         bool   `json:"this"` // the process serving the page
}

// Stream is one row of the Streams page.
type Stream struct {
	Name         string  `json:"name"`
	Input        string  `json:"input"`
	Topic        string  `json:"topic"`
	Status       string  `json:"status"`
	Error        string  `json:"error,omitempty"`
	Strategy     string  `json:"strategy"`
	Watermark    string  `json:"watermark"` // "" when none yet
	LagRecords   int64   `json:"lag_records"`
	InPerSec     float64 `json:"in_per_sec"`
	OutPerSec    float64 `json:"out_per_sec"`
	RecordsIn    int64   `json:"records_in"`
	RecordsOut   int64   `json:"records_out"`
	LateRows     int64   `json:"late_rows"`
	Skipped      int64   `json:"skipped"`
	DeadLettered int64   `json:"dead_lettered"`
}

// Topology is a stream's graph, in order from source to sink.
type Topology struct {
	Stream string `json:"stream"`
	Status string `json:"status"`
	Nodes  []Node `json:"nodes"`
}

// Node kinds.
const (
	KindSource      = "source"
	KindRepartition = "repartition"
	KindCombine     = "combine"
	KindAggregate   = "aggregate"
	KindProject     = "project"
	KindSink        = "sink"
)

// Node is one box of a topology.
type Node struct {
	Kind  string `json:"kind"`
	Title string `json:"title"` // "source clicks", "repartition by user_id"
	Topic string `json:"topic,omitempty"`
	// Partitions of Topic.
	Partitions int    `json:"partitions,omitempty"`
	Stats      []Stat `json:"stats"`
	// Distribution is a hop's output per internal partition.
	Distribution []Bar `json:"distribution,omitempty"`
	// NullKeys: rows without the column a repartition hop keys by (nil:
	// not a repartition hop).
	NullKeys *int64 `json:"null_keys,omitempty"`
}

// Stat is one labelled figure of a node.
type Stat struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Bar is one internal partition's output.
type Bar struct {
	Partition int   `json:"partition"`
	Records   int64 `json:"records"`
	Bytes     int64 `json:"bytes"`
}

// Partition is one input partition of one stage.
type Partition struct {
	Stream     string `json:"stream"`
	Stage      string `json:"stage"`
	Topic      string `json:"topic"`
	Partition  int    `json:"partition"`
	RecordsIn  int64  `json:"records_in"`
	LagRecords int64  `json:"lag_records"`
	OpenGroups int64  `json:"open_groups"`
	KeyGroups  int    `json:"key_groups"` // key groups the partition owns
	Placement  string `json:"placement"`
	Node       string `json:"node"`
}

//go:embed assets
var assets embed.FS

var pages = template.Must(template.ParseFS(assets, "assets/page.html"))

// Handler serves the console's pages, assets and JSON endpoints.
func Handler(src Source) http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(static)))
	mux.HandleFunc("GET /api/streams", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, src.Streams()) })
	mux.HandleFunc("GET /api/partitions", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, src.Partitions()) })
	mux.HandleFunc("GET /api/cluster", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, src.Members()) })
	mux.HandleFunc("GET /cluster", func(w http.ResponseWriter, r *http.Request) {
		page(w, "cluster", "Cluster", "/api/cluster", src.Members())
	})
	mux.HandleFunc("GET /api/topology", func(w http.ResponseWriter, r *http.Request) {
		t, ok := src.Topology(r.URL.Query().Get("stream"))
		if !ok {
			http.Error(w, "no such stream", http.StatusNotFound)
			return
		}
		writeJSON(w, t)
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		page(w, "streams", "Streams", "/api/streams", src.Streams())
	})
	mux.HandleFunc("GET /partitions", func(w http.ResponseWriter, r *http.Request) {
		page(w, "partitions", "Partitions", "/api/partitions", src.Partitions())
	})
	mux.HandleFunc("GET /topology", func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Query().Get("stream")
		t, ok := src.Topology(name)
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			page(w, "missing", "No stream "+name, "", nil)
			return
		}
		page(w, "topology", "Topology of "+name, "/api/topology?stream="+template.URLQueryEscaper(name), t)
	})
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}

// page renders the shell of a page with its first data embedded, so it
// shows at once; the script then polls api.
func page(w http.ResponseWriter, kind, title, api string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_ = pages.Execute(w, struct {
		Kind, Title, API string
		Data             any
	}{kind, title, api, data})
}

// Rates turns counters into per-second rates between polls: each call
// compares a counter with the value it had at least a second before.
type Rates struct {
	mu   sync.Mutex
	last map[string]sample
}

type sample struct {
	t    time.Time
	v    float64
	rate float64
}

// Rate is key's rate per second as of now, given its total v.
func (r *Rates) Rate(key string, v float64, now time.Time) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		r.last = map[string]sample{}
	}
	s, ok := r.last[key]
	if !ok || v < s.v {
		r.last[key] = sample{t: now, v: v}
		return 0
	}
	dt := now.Sub(s.t).Seconds()
	if dt < 1 {
		return s.rate // too soon to measure again: the last rate stands
	}
	rate := (v - s.v) / dt
	r.last[key] = sample{t: now, v: v, rate: rate}
	return rate
}
