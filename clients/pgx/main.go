// Command pgx runs the client-compatibility session of clients/run.sh
// against a running TurbineSQL with pgx, once per QueryExecMode. It exits
// non-zero, naming the step, at the first difference.
//
//	go run ./clients/pgx -dsn postgres://turbine@127.0.0.1:5433/turbine
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

var modes = []pgx.QueryExecMode{
	pgx.QueryExecModeCacheStatement,
	pgx.QueryExecModeCacheDescribe,
	pgx.QueryExecModeDescribeExec,
	pgx.QueryExecModeExec,
	pgx.QueryExecModeSimpleProtocol,
}

// reading is one row of the source, scanned into typed Go values.
type reading struct {
	Sensor string
	Seq    int64
	Value  *float64
	OK     *bool
	TS     time.Time
}

func f(v float64) *float64 { return &v }
func b(v bool) *bool       { return &v }

func ts(s string) time.Time {
	t, err := time.Parse("2006-01-02 15:04:05.999", s)
	if err != nil {
		panic(err)
	}
	return t
}

var wantReadings = []reading{
	{"s1", 1, f(1.5), b(true), ts("2024-01-01 00:00:00")},
	{"s2", 2, f(-2.25), b(false), ts("2024-01-01 00:00:30.5")},
	{"s1", 3, nil, nil, ts("2024-01-01 00:00:59")},
	{"s1", 4, f(0.5), b(true), ts("2024-01-01 00:02:00")},
	{"s2", 5, f(0.5), b(true), ts("2024-01-01 00:02:00")},
}

func main() {
	dsn := flag.String("dsn", "postgres://turbine@127.0.0.1:5433/turbine?sslmode=disable", "connection string")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := run(ctx, *dsn); err != nil {
		fmt.Fprintln(os.Stderr, "pgx: FAIL:", err)
		os.Exit(1)
	}
	fmt.Println("pgx: ok")
}

func run(ctx context.Context, dsn string) error {
	if err := setup(ctx, dsn); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	for _, mode := range modes {
		if err := session(ctx, dsn, mode); err != nil {
			return fmt.Errorf("%s: %w", mode, err)
		}
		fmt.Printf("pgx: %s ok\n", mode)
	}
	return nil
}

func connect(ctx context.Context, dsn string, mode pgx.QueryExecMode) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.DefaultQueryExecMode = mode
	return pgx.ConnectConfig(ctx, cfg)
}

// setup creates the source and the stream, writes the rows and flushes, in
// the default mode.
func setup(ctx context.Context, dsn string) error {
	c, err := connect(ctx, dsn, pgx.QueryExecModeCacheStatement)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	for _, stmt := range []string{
		`CREATE SOURCE readings (sensor TEXT, seq BIGINT, value DOUBLE, ok BOOLEAN, ts TIMESTAMP,
		   WATERMARK FOR ts AS ts) WITH (topic = 'readings', partitions = 2, partition_key = 'sensor')`,
		`INSERT INTO readings VALUES ('s1', 1, 1.5, true, TIMESTAMP '2024-01-01 00:00:00'),
		   ('s2', 2, -2.25, false, TIMESTAMP '2024-01-01 00:00:30.5'), ('s1', 3, NULL, NULL, TIMESTAMP '2024-01-01 00:00:59')`,
		`CREATE STREAM per_sensor WITH (topic = 'per_sensor') AS
		   SELECT sensor, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS w, COUNT(*) AS n, SUM(value) AS total
		   FROM readings GROUP BY sensor, TUMBLE(ts, INTERVAL '1' MINUTE)`,
	} {
		if _, err := c.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("%.40s...: %w", stmt, err)
		}
	}
	// Parameters of every type, through INSERT.
	tag, err := c.Exec(ctx, `INSERT INTO readings VALUES ($1, $2, $3, $4, $5), ($6, $7, $8, $9, $10)`,
		"s1", int64(4), 0.5, true, ts("2024-01-01 00:02:00"), "s2", int64(5), 0.5, true, ts("2024-01-01 00:02:00"))
	if err != nil {
		return fmt.Errorf("parameterised INSERT: %w", err)
	}
	if tag.String() != "INSERT 0 2" {
		return fmt.Errorf("parameterised INSERT: tag %q", tag)
	}
	if _, err := c.Exec(ctx, "FLUSH"); err != nil {
		return fmt.Errorf("FLUSH: %w", err)
	}
	return nil
}

func session(ctx context.Context, dsn string, mode pgx.QueryExecMode) error {
	c, err := connect(ctx, dsn, mode)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer c.Close(ctx)

	if v := c.PgConn().ParameterStatus("server_version"); !strings.HasPrefix(v, "16.") {
		return fmt.Errorf("server_version %q", v)
	}

	got, err := readings(ctx, c, `SELECT sensor, seq, value, ok, ts FROM readings ORDER BY seq`)
	if err != nil {
		return fmt.Errorf("typed SELECT: %w", err)
	}
	if !reflect.DeepEqual(got, wantReadings) {
		return fmt.Errorf("typed SELECT:\n got %s\nwant %s", show(got), show(wantReadings))
	}

	got, err = readings(ctx, c, `SELECT sensor, seq, value, ok, ts FROM readings
		WHERE seq >= $1 AND sensor = $2 AND ts > $3 AND value < $4 AND ok = $5 ORDER BY seq`,
		int64(2), "s2", ts("2024-01-01 00:00:10"), 1.0, true)
	if err != nil {
		return fmt.Errorf("parameterised SELECT: %w", err)
	}
	if want := wantReadings[4:5]; !reflect.DeepEqual(got, want) {
		return fmt.Errorf("parameterised SELECT:\n got %s\nwant %s", show(got), show(want))
	}

	// The stream's closed windows.
	rows, err := c.Query(ctx, `SELECT sensor, w, n, total FROM per_sensor ORDER BY sensor`)
	if err != nil {
		return fmt.Errorf("stream SELECT: %w", err)
	}
	type window struct {
		Sensor string
		W      time.Time
		N      int64
		Total  float64
	}
	wins, err := pgx.CollectRows(rows, pgx.RowToStructByPos[window])
	if err != nil {
		return fmt.Errorf("stream SELECT: %w", err)
	}
	wantWins := []window{{"s1", ts("2024-01-01 00:00:00"), 2, 1.5}, {"s2", ts("2024-01-01 00:00:00"), 1, -2.25}}
	if !reflect.DeepEqual(wins, wantWins) {
		return fmt.Errorf("stream SELECT:\n got %+v\nwant %+v", wins, wantWins)
	}

	// An error, told by its SQLSTATE; the connection stays usable.
	_, err = c.Exec(ctx, "SELECT * FROM missing")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42P01" {
		return fmt.Errorf("SELECT from a missing relation: want SQLSTATE 42P01, got %v", err)
	}

	// Transactions are accepted (and are no-ops); SHOW answers settings.
	tx, err := c.Begin(ctx)
	if err != nil {
		return fmt.Errorf("BEGIN: %w", err)
	}
	var version string
	if err := tx.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
		return fmt.Errorf("SHOW server_version: %w", err)
	}
	if !strings.HasPrefix(version, "16.") {
		return fmt.Errorf("SHOW server_version = %q", version)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("COMMIT: %w", err)
	}
	if _, err := c.Exec(ctx, "SET application_name = 'pgx-session'"); err != nil {
		return fmt.Errorf("SET: %w", err)
	}
	var one int
	if err := c.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		return fmt.Errorf("SELECT 1: %d, %v", one, err)
	}
	return nil
}

func readings(ctx context.Context, c *pgx.Conn, sql string, args ...any) ([]reading, error) {
	rows, err := c.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[reading])
	for i := range out {
		out[i].TS = out[i].TS.UTC()
	}
	return out, err
}

func show(rs []reading) string {
	var parts []string
	for _, r := range rs {
		v, ok := "NULL", "NULL"
		if r.Value != nil {
			v = fmt.Sprint(*r.Value)
		}
		if r.OK != nil {
			ok = fmt.Sprint(*r.OK)
		}
		parts = append(parts, fmt.Sprintf("(%s %d %s %s %s)", r.Sensor, r.Seq, v, ok, r.TS.Format(time.RFC3339Nano)))
	}
	return strings.Join(parts, " ")
}
