// Package console serves the web console at / on the HTTP address: a
// Streams page, a page per stream (its SQL, its plan as EXPLAIN prints it,
// its graph source → hop → aggregate → sink with the hop's internal topic
// and per-partition output distribution, and charts of its last minutes),
// a Sources page (schema, partitions, rate, placement), a Partitions page
// and a Cluster page. Everything is embedded in the binary (no CDN: the
// machines may have no internet), charts included: they are SVG drawn by
// console.js. Pages render from JSON the server embeds at load and then
// poll the same JSON endpoints, so they stay current without a reload;
// every name and number is text in the DOM (HTML, and SVG text in the
// charts), and pages link to each other with ordinary hrefs.
//
// It knows nothing of streams: a Source supplies the figures, and a
// History keeps the charts' samples.
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
	Sources() []SourceInfo
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

// Topology is a stream's page: its graph, in order from source to sink,
// what it is (its SQL, its plan) and its recent history.
type Topology struct {
	Stream string `json:"stream"`
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
	// SQL is the statement the catalog holds for the stream.
	SQL       string `json:"sql"`
	Guarantee string `json:"guarantee"`
	// Strategy and Reason are the plan's choice and why, as EXPLAIN's
	// first line gives them; Plan is EXPLAIN's text. Empty while the
	// stream does not run (it is planned when it starts).
	Strategy string   `json:"strategy,omitempty"`
	Reason   string   `json:"reason,omitempty"`
	Plan     []string `json:"plan,omitempty"`
	Nodes    []Node   `json:"nodes"`
	// History is the stream's last minutes, a sample every HistoryEvery
	// seconds, oldest first.
	History      []Point `json:"history"`
	HistoryEvery float64 `json:"history_every"`
}

// NodeKind is what a box of a stream's graph does.
type NodeKind string

// Node kinds.
const (
	KindSource      NodeKind = "source"
	KindRepartition NodeKind = "repartition"
	KindCombine     NodeKind = "combine"
	KindAggregate   NodeKind = "aggregate"
	KindProject     NodeKind = "project"
	KindSink        NodeKind = "sink"
)

// Node is one box of a topology.
type Node struct {
	Kind  NodeKind `json:"kind"`
	Title string   `json:"title"` // "source clicks", "repartition by user_id"
	// Link is the page of what the node reads (a source's, or the stream
	// it reads), "" for none.
	Link  string `json:"link,omitempty"`
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

// SourceInfo is one source on the Sources page.
type SourceInfo struct {
	Name          string   `json:"name"`
	Topic         string   `json:"topic"`
	Format        string   `json:"format"`
	OnError       string   `json:"on_error"`
	DLQTopic      string   `json:"dlq_topic,omitempty"`
	PartitionKey  string   `json:"partition_key,omitempty"`
	PartitionHash string   `json:"partition_hash,omitempty"`
	Watermark     string   `json:"watermark,omitempty"` // "ts - 5000 ms"
	Columns       []Column `json:"columns"`
	// Partitions of the topic, with what each holds; empty when Kafka
	// could not say (Error tells why).
	Partitions []SourcePartition `json:"partitions"`
	Records    int64             `json:"records"` // written to the topic, over its partitions
	InPerSec   float64           `json:"in_per_sec"`
	// EventRate is its rate in event time from the engine's statistics
	// ("" while it has none).
	EventRate string `json:"event_rate,omitempty"`
	// Placement sums up the placement check of its partition key.
	Placement string   `json:"placement"`
	Streams   []string `json:"streams"` // the streams reading it
	Error     string   `json:"error,omitempty"`
}

// Column is one column of a source, as DESCRIBE shows it.
type Column struct {
	Name   string `json:"name"`
	Type   string `json:"type"`
	Detail string `json:"detail,omitempty"`
}

// SourcePartition is one partition of a source's topic.
type SourcePartition struct {
	Partition int   `json:"partition"`
	Records   int64 `json:"records"` // its end offset: records written to it
	// Placement is the check's verdict on it, from the streams that check
	// it.
	Placement string `json:"placement"`
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
	// Node is the id of the process running the partition's task, as the
	// Cluster page and SHOW CLUSTER name it.
	Node string `json:"node"`
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
	mux.HandleFunc("GET /api/sources", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, src.Sources()) })
	mux.HandleFunc("GET /sources", func(w http.ResponseWriter, r *http.Request) {
		page(w, "sources", "Sources", "/api/sources", src.Sources())
	})
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
		page(w, "topology", "Stream "+name, "/api/topology?stream="+template.URLQueryEscaper(name), t)
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
