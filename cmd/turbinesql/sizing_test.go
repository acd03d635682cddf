package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turbinesql/turbinesql/state"
)

func TestSizeCommand(t *testing.T) {
	var out bytes.Buffer
	if err := size([]string{"--peak-events-per-sec", "4200", "--avg-record-kb", "18", "--target-consumers", "12"}, &out); err != nil {
		t.Fatal(err)
	}
	want := "peak_mb_s               73.83\nthroughput_partitions   8\nparallelism_partitions  12\nheadroom                1.5\nrecommended             18\nrecommended_valid       24\ndriver                  parallelism\n"
	if out.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", out.String(), want)
	}
	for _, c := range []struct {
		args []string
		err  string
	}{
		{[]string{"--peak-events-per-sec", "1", "--avg-record-kb", "1"}, "--target-consumers is required"},
		{[]string{"--peak-events-per-sec", "0", "--avg-record-kb", "1", "--target-consumers", "1"}, "--peak-events-per-sec must be positive"},
		{[]string{"--peak-events-per-sec", "1", "--avg-record-kb", "1", "--target-consumers", "1", "--headroom", "0.5"}, "--headroom must be at least 1"},
	} {
		err := size(c.args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%v: %v, want %q", c.args, err, c.err)
		}
	}
}

func TestJSONKey(t *testing.T) {
	for _, c := range []struct {
		value  string
		fields []string
		key    string
		null   bool
		ok     bool
	}{
		{`{"s":"42","f":"fx-1"}`, []string{"s"}, "42", false, true},
		{`{"s":"42","f":"fx-1"}`, []string{"s", "f"}, "42:fx-1", false, true},
		{`{"s":42}`, []string{"s"}, "42", false, true},
		{`{"s":true}`, []string{"s"}, "true", false, true},
		{`{"s":""}`, []string{"s"}, "", false, true},
		{`{"s":null}`, []string{"s"}, "", true, true},
		{`{"t":1}`, []string{"s"}, "", true, true},
		{`{"s":"a","f":null}`, []string{"s", "f"}, "", true, true},
		{`{"s":{"a": 1}}`, []string{"s"}, `{"a":1}`, false, true},
		{`not json`, []string{"s"}, "", true, false},
		{`[1]`, []string{"s"}, "", true, false},
	} {
		k, ok := jsonKey([]byte(c.value), c.fields)
		if ok != c.ok || (k == nil) != c.null || string(k) != c.key {
			t.Errorf("jsonKey(%s, %v) = %q (nil %t), %t; want %q (nil %t), %t", c.value, c.fields, k, k == nil, ok, c.key, c.null, c.ok)
		}
	}
}

// The offline skew check on a topic an ordinary producer wrote (murmur2
// on the record key): at the topic's count its rows are where the records
// are; at another count, where murmur2 puts the keys, computed here.
func TestSkewCommand(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "caps"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("caps"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	by6 := make([]int, 6)
	for i := 0; i < 400; i++ {
		store := fmt.Sprint(i % 9)
		if i%3 == 0 {
			store = "42" // the flagship
		}
		v, _ := json.Marshal(map[string]any{"store_id": store, "fixture_id": fmt.Sprint("fx-", i%50)})
		recs = append(recs, &kgo.Record{Key: []byte(store), Value: v})
		by6[state.PartitionFor([]byte(store+":"+fmt.Sprint("fx-", i%50)), 6)]++
	}
	recs = append(recs, &kgo.Record{Value: []byte(`{"fixture_id":"x"}`)}, &kgo.Record{Value: []byte(`garbage`)})
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	placed := make([]int, 4)
	for _, r := range recs[:400] {
		placed[r.Partition]++
	}
	brokers := strings.Join(c.ListenAddrs(), ",")
	rows := func(args ...string) []string {
		t.Helper()
		var out bytes.Buffer
		if err := skew(append([]string{"--brokers", brokers, "--topic", "caps"}, args...), &out); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, l := range strings.Split(out.String(), "\n")[1:] {
			if f := strings.Fields(l); len(f) == 4 {
				got = append(got, f[0]+" "+f[1])
			}
		}
		if !strings.Contains(out.String(), "NOTICE: skew of ") || !strings.Contains(out.String(), "1 records that are not JSON objects not counted") {
			t.Fatalf("summary missing:\n%s", out.String())
		}
		return got
	}
	want := func(counts []int) []string {
		var out []string
		for p, n := range counts {
			out = append(out, fmt.Sprintf("%d %d", p, n))
		}
		return out
	}
	if got, w := rows("--key-field", "store_id"), want(placed); strings.Join(got, ",") != strings.Join(w, ",") {
		t.Fatalf("store_id at the topic's count: %v, want %v (where the records are)", got, w)
	}
	if got, w := rows("--key-field", "store_id,fixture_id", "--partitions", "6"), want(by6); strings.Join(got, ",") != strings.Join(w, ",") {
		t.Fatalf("composite on 6: %v, want %v", got, w)
	}
	if err := skew([]string{"--brokers", brokers, "--topic", "caps"}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "--key-field is required") {
		t.Fatalf("no key field: %v", err)
	}
}
