package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/rescale"
)

// repeated is a flag given any number of times.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

// rescaleCmd runs `turbinesql rescale`: the offline move of a stopped
// app's keyed state to a new partition count (package rescale).
func rescaleCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rescale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	brokers := fs.String("brokers", "", "comma-separated Kafka bootstrap brokers of the app [required]")
	app := fs.String("app-id", "turbinesql", "the app id its servers run with (serve --app-id)")
	to := fs.Int("to", 0, "the partition count to rescale to; must divide 960 [required]")
	var dirs, streams repeated
	fs.Var(&dirs, "data-dir", "a node's data dir (serve --data-dir); repeat for each node")
	fs.Var(&streams, "stream", "rescale only this stream; repeatable (default: every keyed stateful stream)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, `usage: turbinesql rescale --brokers B [--app-id A] --to M [--data-dir D ...] [--stream S ...]

Moves the keyed state of a stopped app's streams from their partition count
to M, whole key groups at a time, in each stream's changelog; the input topic
grows to M if it has fewer partitions. Stop every server of the app first.`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *brokers == "" || *to == 0 || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	k, err := kafkaio.New(&kafkaio.Conn{Brokers: strings.Split(*brokers, ",")})
	if err != nil {
		fmt.Fprintf(stderr, "turbinesql rescale: %v\n", err)
		return 1
	}
	defer k.Close()
	if err := k.Ping(ctx); err != nil {
		fmt.Fprintf(stderr, "turbinesql rescale: %v\n", err)
		return 1
	}
	if _, err := rescale.Run(ctx, k, rescale.Options{AppID: *app, To: *to, DataDirs: dirs, Streams: streams, Out: stdout}); err != nil {
		fmt.Fprintf(stderr, "turbinesql rescale: %v\n", err)
		return 1
	}
	return 0
}
