package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"
)

func noEnv(string) (string, bool) { return "", false }

func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help"}, {"serve", "--help"}, {"serve", "-h"}} {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut, noEnv); code != 0 {
			t.Errorf("%v: exit %d (%s)", args, code, errOut.String())
		}
		if !strings.Contains(out.String(), "usage: turbinesql") {
			t.Errorf("%v: no usage on stdout: %q", args, out.String())
		}
	}
	// Every subcommand: -h prints its usage line and its flags, exit 0.
	for _, tc := range []struct{ cmd, flag string }{
		{"serve", "-pg-addr"}, {"rescale", "-to"}, {"size", "-peak-events-per-sec"}, {"skew", "-key-field"},
	} {
		for _, h := range []string{"-h", "--help"} {
			var out, errOut bytes.Buffer
			if code := run([]string{tc.cmd, h}, &out, &errOut, noEnv); code != 0 {
				t.Errorf("%s %s: exit %d (%s)", tc.cmd, h, code, errOut.String())
			}
			all := out.String() + errOut.String()
			if !strings.Contains(all, "usage: turbinesql "+tc.cmd) || !strings.Contains(all, tc.flag) {
				t.Errorf("%s %s: no usage line naming its flags: %q", tc.cmd, h, all)
			}
		}
	}
	if code := run([]string{"audit", "-h"}, &bytes.Buffer{}, &bytes.Buffer{}, noEnv); code != 0 {
		t.Errorf("audit -h: exit %d", code)
	}
	for _, args := range [][]string{{"size", "--frob"}, {"skew", "--frob"}, {"audit", "--frob"}} {
		var errOut bytes.Buffer
		if code := run(args, &bytes.Buffer{}, &errOut, noEnv); code != 2 {
			t.Errorf("%v: exit %d, want 2 for a flag it does not know (%s)", args, code, errOut.String())
		}
	}
	var out bytes.Buffer
	run([]string{"serve", "--help"}, &out, &out, noEnv)
	for _, f := range []string{"-auth", "-tls-required", "-kafka-sasl-mechanism", "-kafka-tls-ca", "-config", "-log-format", "flag > environment > config file"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("serve --help does not mention %s", f)
		}
	}
}

// TestBadConfigRefused: each bad value stops the start, naming the key,
// where the value came from and what is accepted.
func TestBadConfigRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--auth", "md5"}, nil, `auth "md5" (from flag --auth) is not valid: accepted values are trust, scram`},
		{nil, map[string]string{"TURBINE_LOG_LEVEL": "loud"}, `log-level "loud" (from environment TURBINE_LOG_LEVEL) is not valid: accepted values are debug, info, warn, error`},
		{[]string{"--kafka-sasl-mechanism", "GSSAPI"}, nil, `accepted values are "" (none), PLAIN, SCRAM-SHA-256, SCRAM-SHA-512`},
		{[]string{"--password-file", "/nonexistent/pw"}, nil, "password-file (from flag --password-file)"},
		{[]string{"--commit-interval", "often"}, nil, `"often" is not a duration: a number with a unit, e.g. 500ms, 30s, 2m or 1h30m`},
		{nil, map[string]string{"TURBINE_STATE_CACHE_MB": "lots"}, `state-cache-mb (from environment TURBINE_STATE_CACHE_MB): "lots" is not a whole number`},
		{nil, map[string]string{"TURBINE_KAFKA_TLS": "maybe"}, `kafka-tls (from environment TURBINE_KAFKA_TLS): "maybe" is not a boolean: true or false`},
		{[]string{"--state-cache-mb", "-1"}, nil, "--state-cache-mb -1: want a size in MB, or 0 for unlimited"},
		{nil, map[string]string{"TURBINESQL_STATE_MIN_RUN_PARTIALS": "0"}, `TURBINESQL_STATE_MIN_RUN_PARTIALS="0": want a count of 1 or more`},
		{nil, map[string]string{"TURBINESQL_STATE_MAX_WINDOW_RUNS": "none"}, `TURBINESQL_STATE_MAX_WINDOW_RUNS="none": want a count of 1 or more`},
		{nil, map[string]string{"TURBINESQL_STATE_MAX_HOT_GROUPS": "0"}, `TURBINESQL_STATE_MAX_HOT_GROUPS="0": want a count of 1 or more`},
	} {
		var out, errOut bytes.Buffer
		env := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
		if code := run(append([]string{"serve"}, tc.args...), &out, &errOut, env); code != 2 {
			t.Errorf("%v %v: exit %d", tc.args, tc.env, code)
		}
		if !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%v %v: %q does not say %q", tc.args, tc.env, errOut.String(), tc.want)
		}
	}
}

// syncBuf is a bytes.Buffer the server's logger and the test share.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestJSONLogsAndExposedTrustWarning: --log-format json logs one JSON
// object per line, and trust on a non-loopback address warns loudly.
func TestJSONLogsAndExposedTrustWarning(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var out, logs syncBuf
	done := make(chan int)
	go func() {
		done <- serve(ctx, []string{"--data-dir", t.TempDir(), "--pg-addr", "0.0.0.0:0", "--http-addr", "127.0.0.1:0",
			"--kafka-addr", "127.0.0.1:0", "--log-format", "json"}, &out, &logs, noEnv)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), "INSECURE") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("serve exit %d: %s", code, logs.String())
	}
	var warned bool
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		if rec["level"] == "WARN" && strings.Contains(rec["msg"].(string), "--auth trust") {
			warned = true
		}
	}
	if !warned {
		t.Fatalf("no warning about trust on 0.0.0.0: %s", logs.String())
	}
}
