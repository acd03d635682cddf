package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/turbinesql/turbinesql/server"
	"github.com/turbinesql/turbinesql/sizing"
)

// size is `turbinesql size`: the calculator of SHOW SIZING, offline.
func size(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("size", flag.ContinueOnError)
	peak := fs.Float64("peak-events-per-sec", 0, "peak events per second (the measured peak, not the mean) [required]")
	kb := fs.Float64("avg-record-kb", 0, "average record size in KiB [required]")
	consumers := fs.Int64("target-consumers", 0, "the most consumers the group will run [required]")
	ceiling := fs.Float64("per-partition-mb-s", sizing.DefaultPerPartitionMBs, "MiB/s one partition and its consumer absorb")
	headroom := fs.Float64("headroom", sizing.DefaultHeadroom, "factor over the larger requirement, at least 1")
	if err := parseTool(fs, args, `usage: turbinesql size --peak-events-per-sec N --avg-record-kb N --target-consumers N [flags]

Recommends a partition count for a topic from its peak rate, record size and
the most consumers its group will run (the calculator of SHOW SIZING), rounded
up to a count that divides 960 for keyed stateful streams.`, out); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, name := range []string{"peak-events-per-sec", "avg-record-kb", "target-consumers"} {
		if !set[name] {
			return fmt.Errorf("--%s is required (e.g. turbinesql size --peak-events-per-sec 4200 --avg-record-kb 18 --target-consumers 12)", name)
		}
	}
	plan, err := sizing.Size(sizing.Inputs{PeakEventsPerSec: *peak, AvgRecordKB: *kb, PerPartitionMBs: *ceiling, TargetConsumers: *consumers, Headroom: *headroom})
	if err != nil {
		return flagError(err)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "peak_mb_s\t%v\n", plan.PeakMBs)
	fmt.Fprintf(tw, "throughput_partitions\t%d\n", plan.ThroughputPartitions)
	fmt.Fprintf(tw, "parallelism_partitions\t%d\n", plan.ParallelismPartitions)
	fmt.Fprintf(tw, "headroom\t%v\n", plan.Headroom)
	fmt.Fprintf(tw, "recommended\t%d\n", plan.Recommended)
	fmt.Fprintf(tw, "recommended_valid\t%d\n", plan.RecommendedValid)
	fmt.Fprintf(tw, "driver\t%s\n", plan.Driver)
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range plan.Notices {
		fmt.Fprintln(out, "NOTICE:", n)
	}
	return nil
}

// flagError names a refused input by its flag.
func flagError(err error) error {
	var ie *sizing.InputError
	if errors.As(err, &ie) && ie.Field != "" {
		return fmt.Errorf("--%s %s", strings.ReplaceAll(ie.Field, "_", "-"), ie.Reason)
	}
	return err
}

// skew is `turbinesql skew`: SHOW SKEW's check on a topic of any Kafka
// cluster, keyed by fields of its JSON values, before any source exists.
func skew(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("skew", flag.ContinueOnError)
	brokers := fs.String("brokers", "", "comma-separated Kafka bootstrap brokers [required]")
	topic := fs.String("topic", "", "the topic to sample [required]")
	keyField := fs.String("key-field", "", "the JSON field of each value that is the key; several, comma-separated, make a composite key joined with ':' (store_id,fixture_id is store_id || ':' || fixture_id) [required]")
	partitions := fs.Int("partitions", 0, "the partition count to place keys on (default: the topic's)")
	tolerance := fs.Float64("tolerance", sizing.DefaultTolerance, "how far above the mean a partition may carry before it is hot")
	sample := fs.Int("sample", sizing.DefaultSample, "how many records to sample, the last of each partition")
	timeout := fs.Duration("timeout", time.Minute, "give up after this long")
	if err := parseTool(fs, args, `usage: turbinesql skew --brokers B --topic T --key-field F[,F...] [flags]

Samples a topic's records on any Kafka cluster and reports how the key (fields
of each JSON value) spreads over the partitions under murmur2, for the topic's
count or --partitions: mean, peak-to-mean ratio and hot partitions (SHOW SKEW,
before any source exists).`, out); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var bs []string
	for _, b := range strings.Split(*brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			bs = append(bs, b)
		}
	}
	var fields []string
	for _, f := range strings.Split(*keyField, ",") {
		if f = strings.TrimSpace(f); f != "" {
			fields = append(fields, f)
		}
	}
	switch {
	case len(bs) == 0:
		return errors.New("--brokers is required")
	case *topic == "":
		return errors.New("--topic is required")
	case len(fields) == 0:
		return errors.New("--key-field is required")
	case *partitions < 0:
		return fmt.Errorf("--partitions must be at least 1, got %d", *partitions)
	case *sample < 1:
		return fmt.Errorf("--sample must be at least 1, got %d", *sample)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	// Keys are kept until the topic's count is known: the check needs the
	// count before the first key.
	var keys [][]byte
	var undecodable int
	n, err := server.SampleTopic(ctx, bs, *topic, *sample, func(_, value []byte) error {
		k, ok := jsonKey(value, fields)
		if !ok {
			undecodable++
			return nil
		}
		keys = append(keys, k)
		return nil
	})
	if err != nil {
		return err
	}
	if *partitions > 0 {
		n = *partitions
	}
	check, err := sizing.NewSkew(n)
	if err != nil {
		return flagError(err)
	}
	for _, k := range keys {
		check.Add(k)
	}
	report, err := check.Report(*tolerance)
	if errors.Is(err, sizing.ErrNoKeys) {
		return fmt.Errorf("no record of topic %s with a non-NULL %s among the %d sampled (%d not JSON objects)", *topic, *keyField, len(keys)+undecodable, undecodable)
	}
	if err != nil {
		return flagError(err)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "partition\trecords\tratio_to_mean\thot\t")
	for _, p := range report.Partitions {
		fmt.Fprintf(tw, "%d\t%d\t%v\t%t\t\n", p.Partition, p.Records, p.RatioToMean, p.Hot)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	msg, detail, hint := report.Summary(strings.Join(fields, " || ':' || ") + " of " + *topic)
	if undecodable > 0 {
		detail += fmt.Sprintf("; %d records that are not JSON objects not counted", undecodable)
	}
	fmt.Fprintln(out, "NOTICE:", msg)
	fmt.Fprintln(out, "DETAIL:", detail)
	if hint != "" {
		fmt.Fprintln(out, "HINT:", hint)
	}
	return nil
}

// jsonKey is the key text of a JSON object value: its fields' values
// joined with ':', as key || ':' || key2 would give in SQL. A string is
// its text, a number as written, true/false, anything else its JSON. A
// missing or null field makes the key NULL (nil), as || does. ok is false
// when value is not a JSON object.
func jsonKey(value []byte, fields []string) (key []byte, ok bool) {
	var obj map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.UseNumber()
	if err := dec.Decode(&obj); err != nil || obj == nil {
		return nil, false
	}
	key = []byte{} // an empty key is a key, not a NULL
	for i, f := range fields {
		raw, present := obj[f]
		if !present {
			return nil, true
		}
		var v any
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber()
		if err := d.Decode(&v); err != nil {
			return nil, false
		}
		if i > 0 {
			key = append(key, ':')
		}
		switch x := v.(type) {
		case nil:
			return nil, true
		case string:
			key = append(key, x...)
		case json.Number:
			key = append(key, x.String()...)
		case bool:
			key = fmt.Appendf(key, "%t", x)
		default:
			var b bytes.Buffer
			if err := json.Compact(&b, raw); err != nil {
				return nil, false
			}
			key = append(key, b.Bytes()...)
		}
	}
	return key, true
}

// runTool runs a tool command and exits non-zero on failure: 2 for a
// command line it cannot read, 1 for a failure of the work.
func runTool(name string, fn func([]string, io.Writer) error, args []string, stdout, stderr io.Writer) int {
	if err := fn(args, stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "turbinesql %s: %v\n", name, err)
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "(turbinesql %s -h lists the flags)\n", name)
			return 2
		}
		return 1
	}
	return 0
}

// usageError is a command line the flag package refused.
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

// parseTool parses a tool's flags. -h (or --help) prints usage (the usage
// line and what the tool does) and the flags to out and returns
// flag.ErrHelp, which the caller's exit code turns into 0.
func parseTool(fs *flag.FlagSet, args []string, usage string, out io.Writer) error {
	fs.SetOutput(io.Discard) // the flag package would print usage on every error
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintln(out, usage)
		fmt.Fprintln(out)
		fs.SetOutput(out)
		fs.PrintDefaults()
		return err
	case err != nil:
		return usageError{err}
	}
	return nil
}
