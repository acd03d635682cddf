// Command decode measures JSON decoding into Arrow record batches alone:
// records of the end-to-end benchmark's shape ({"k": text, "v": bigint,
// "ts": epoch millis}) decoded in batches of 4096, as a stream does per
// fetched partition. It prints records and megabytes per CPU-second, and,
// as a baseline in the same run, the rate of encoding/json unmarshalling
// the same records into a Go struct.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/types"
)

func main() {
	n := flag.Int("records", 2_000_000, "records to decode")
	flag.Parse()
	rng := rand.New(rand.NewPCG(5, 6))
	recs := make([][]byte, *n)
	var bytes int64
	for i := range recs {
		recs[i] = []byte(`{"k":"user-` + strconv.Itoa(rng.IntN(10_000)) + `","v":` + strconv.Itoa(rng.IntN(1000)) +
			`,"ts":` + strconv.FormatInt(1767225600000+int64(i), 10) + `}`)
		bytes += int64(len(recs[i]))
	}
	schema := types.Schema{{Name: "k", Type: types.Text}, {Name: "v", Type: types.Int}, {Name: "ts", Type: types.Timestamp}}
	dec := exec.NewJSONDecoder(schema, nil)
	const batch = 4096
	t0 := cpuTime()
	rows := 0
	for i := 0; i < len(recs); i += batch {
		rec, _, errs := dec.Decode(recs[i:min(i+batch, len(recs))])
		if len(errs) > 0 {
			fmt.Fprintln(os.Stderr, "decode:", errs[0].Err)
			os.Exit(1)
		}
		rows += int(rec.NumRows())
		rec.Release()
	}
	d := (cpuTime() - t0).Seconds()
	type event struct {
		K  string `json:"k"`
		V  int64  `json:"v"`
		TS int64  `json:"ts"`
	}
	t1 := cpuTime()
	var e event
	for _, r := range recs {
		if err := json.Unmarshal(r, &e); err != nil {
			fmt.Fprintln(os.Stderr, "unmarshal:", err)
			os.Exit(1)
		}
	}
	base := (cpuTime() - t1).Seconds()
	fmt.Printf("JSON decode into Arrow batches of %d: %d records (%.1f MB): %.0f records/CPU-s, %.1f MB/CPU-s\n",
		batch, rows, float64(bytes)/1e6, float64(rows)/d, float64(bytes)/1e6/d)
	fmt.Printf("  baseline encoding/json.Unmarshal into a struct: %.0f records/CPU-s; ratio %.2f\n",
		float64(len(recs))/base, base/d)
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	fmt.Printf("  peak RSS %.0f MB\n", float64(ru.Maxrss)/1024)
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
