package pgwire_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turbinesql/turbinesql/pgwire"
)

// Fixed values returned by "SELECT typed".
var (
	typedT1 = time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC)
	typedT2 = time.Date(1999, 12, 31, 23, 59, 59, 123456000, time.UTC)
)

var typedColumns = []pgwire.Column{
	{Name: "id", OID: pgwire.OIDInt8},
	{Name: "score", OID: pgwire.OIDFloat8},
	{Name: "name", OID: pgwire.OIDText},
	{Name: "ok", OID: pgwire.OIDBool},
	{Name: "at", OID: pgwire.OIDTimestamp},
	{Name: "attz", OID: pgwire.OIDTimestampTZ},
}

var typedRows = [][]any{
	{int64(1), 2.5, "alice", true, typedT1, typedT1},
	{int64(-7), 1e20, nil, false, typedT2, typedT2},
}

// fakeError is an engine error with everything errorResponse looks for.
type fakeError struct {
	code, msg, hint string
	pos             int
}

func (e *fakeError) Error() string    { return e.msg }
func (e *fakeError) SQLState() string { return e.code }
func (e *fakeError) Hint() string     { return e.hint }
func (e *fakeError) Position() int    { return e.pos }

// fakeBackend answers a handful of fixed statements; it is a stand-in for
// the engine so that the tests exercise only the wire layer. It records how
// often each statement ran, which sessions exist and which parameters
// arrived.
type fakeBackend struct {
	mu         sync.Mutex
	execs      map[string]int
	lastParams []pgwire.Param
	sessions   int
	closed     int
	users      []string
	// slowEnded receives why each "SELECT slow" stopped (its context's
	// cause); slowStarted is signalled when one starts.
	slowEnded   chan error
	slowStarted chan struct{}
	// unstick releases every "SELECT stuck", which ignores its context.
	unstick chan struct{}
}

func newFakeBackend() *fakeBackend {
	return &fakeBackend{execs: make(map[string]int), slowEnded: make(chan error, 16),
		slowStarted: make(chan struct{}, 16), unstick: make(chan struct{})}
}

func (b *fakeBackend) NewSession(user, database string) pgwire.Session {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sessions++
	b.users = append(b.users, user+"@"+database)
	return &fakeSession{b: b}
}

func (b *fakeBackend) execCount(sql string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.execs[sql]
}

func (b *fakeBackend) params() []pgwire.Param {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lastParams
}

func (b *fakeBackend) counts() (sessions, closed int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sessions, b.closed
}

type fakeSession struct {
	b       *fakeBackend
	closed  bool
	timeout time.Duration // SET statement_timeout = <ms>
}

// StatementTimeout makes fakeSession a pgwire.StatementTimeouter.
func (s *fakeSession) StatementTimeout() time.Duration { return s.timeout }

var setTimeoutRe = regexp.MustCompile(`(?i)^set statement_timeout = (\d+)$`)

// Split cuts at semicolons outside single quotes and drops "--" comments
// (pgx's Ping sends "-- ping").
func (s *fakeSession) Split(sql string) []string {
	var out []string
	inQuote := false
	start := 0
	var cur strings.Builder
	add := func(stmt string) {
		cur.WriteString(stmt)
		if stmt := strings.TrimSpace(cur.String()); stmt != "" {
			out = append(out, stmt)
		}
		cur.Reset()
	}
	for i := 0; i < len(sql); i++ {
		switch sql[i] {
		case '\'':
			inQuote = !inQuote
		case '-':
			if !inQuote && strings.HasPrefix(sql[i:], "--") {
				cur.WriteString(sql[start:i])
				end := strings.IndexByte(sql[i:], '\n')
				if end < 0 {
					end = len(sql) - i
				}
				i += end
				start = i
			}
		case ';':
			if !inQuote {
				add(sql[start:i])
				start = i + 1
			}
		}
	}
	add(sql[start:])
	return out
}

func (s *fakeSession) Describe(ctx context.Context, sql string) (*pgwire.Description, error) {
	q, err := plan(sql)
	if err != nil {
		return nil, err
	}
	return &q.desc, nil
}

func (s *fakeSession) Execute(ctx context.Context, sql string, params []pgwire.Param) (*pgwire.Result, error) {
	s.b.mu.Lock()
	s.b.execs[sql]++
	s.b.lastParams = params
	s.b.mu.Unlock()
	if m := setTimeoutRe.FindStringSubmatch(sql); m != nil {
		ms, _ := strconv.Atoi(m[1])
		s.timeout = time.Duration(ms) * time.Millisecond
		return &pgwire.Result{Tag: "SET"}, nil
	}
	switch strings.ToUpper(sql) {
	case "SELECT SLOW":
		s.b.slowStarted <- struct{}{}
		<-ctx.Done()
		s.b.slowEnded <- context.Cause(ctx)
		return nil, fmt.Errorf("slow query: %w", ctx.Err())
	case "SELECT STUCK":
		<-s.b.unstick
		return &pgwire.Result{Tag: "SELECT 0"}, nil
	}
	q, err := plan(sql)
	if err != nil {
		return nil, err
	}
	return q.run(ctx, params)
}

func (s *fakeSession) Close() {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	if !s.closed {
		s.closed = true
		s.b.closed++
	}
}

type fakeQuery struct {
	desc pgwire.Description
	run  func(ctx context.Context, params []pgwire.Param) (*pgwire.Result, error)
}

// echoRe matches "SELECT $1", "SELECT $1::int8" and what pgx's simple
// protocol makes of them: "SELECT  42 ::int8", "SELECT  'x' ".
var echoRe = regexp.MustCompile(`(?is)^select\s+(\$1|'(?:[^']|'')*'|[^\s:']+)\s*(?:::\s*(\w+))?$`)

var typeByName = map[string]uint32{
	"": pgwire.OIDText, "text": pgwire.OIDText, "int8": pgwire.OIDInt8, "int4": pgwire.OIDInt4,
	"float8": pgwire.OIDFloat8, "bool": pgwire.OIDBool, "timestamp": pgwire.OIDTimestamp,
	"timestamptz": pgwire.OIDTimestampTZ,
}

func rows(cols []pgwire.Column, rows [][]any, tag string) func(context.Context, []pgwire.Param) (*pgwire.Result, error) {
	return func(context.Context, []pgwire.Param) (*pgwire.Result, error) {
		return &pgwire.Result{Columns: cols, Rows: rows, Tag: tag}, nil
	}
}

func plan(sql string) (*fakeQuery, error) {
	upper := strings.ToUpper(strings.Join(strings.Fields(sql), " "))
	text := []pgwire.Column{{Name: "x", OID: pgwire.OIDText}}
	int8Col := []pgwire.Column{{Name: "n", OID: pgwire.OIDInt8}}
	switch {
	case upper == "SELECT TYPED":
		return &fakeQuery{desc: pgwire.Description{Columns: typedColumns}, run: rows(typedColumns, typedRows, "SELECT 2")}, nil
	case upper == "SELECT THREE":
		r := [][]any{{int64(1)}, {int64(2)}, {int64(3)}}
		return &fakeQuery{desc: pgwire.Description{Columns: int8Col}, run: rows(int8Col, r, "SELECT 3")}, nil
	case upper == "SELECT MANY":
		r := make([][]any, 20000)
		for i := range r {
			r[i] = []any{int64(i)}
		}
		return &fakeQuery{desc: pgwire.Description{Columns: int8Col}, run: rows(int8Col, r, "SELECT 20000")}, nil
	case upper == "SELECT NOTICED":
		return &fakeQuery{desc: pgwire.Description{Columns: int8Col}, run: func(context.Context, []pgwire.Param) (*pgwire.Result, error) {
			return &pgwire.Result{Columns: int8Col, Rows: [][]any{{int64(1)}, {int64(2)}}, Tag: "SELECT 2", Notices: []pgwire.Notice{
				{Message: "first", Detail: "some detail", Hint: "a hint"}, {Message: "second"},
			}}, nil
		}}, nil
	case upper == "SELECT EMPTYSTR":
		return &fakeQuery{desc: pgwire.Description{Columns: text}, run: rows(text, [][]any{{""}, {nil}}, "SELECT 2")}, nil
	case upper == "SELECT UNENCODABLE":
		return &fakeQuery{desc: pgwire.Description{Columns: text}, run: rows(text, [][]any{{"ok"}, {struct{}{}}}, "SELECT 2")}, nil
	case upper == "SELECT SHAPESHIFT":
		// Describe and Execute disagree, as a buggy engine might.
		two := []pgwire.Column{{Name: "a", OID: pgwire.OIDText}, {Name: "b", OID: pgwire.OIDText}}
		return &fakeQuery{desc: pgwire.Description{Columns: text}, run: rows(two, [][]any{{"1", "2"}}, "SELECT 1")}, nil
	case upper == "SHOW SNEAKY":
		return &fakeQuery{run: rows(text, [][]any{{"1"}}, "SHOW")}, nil
	case upper == "SELECT FAILING":
		return &fakeQuery{desc: pgwire.Description{Columns: text}, run: func(context.Context, []pgwire.Param) (*pgwire.Result, error) {
			return nil, &fakeError{code: "22012", msg: "division by zero"}
		}}, nil
	case upper == "SELECT SLOW" || upper == "SELECT STUCK": // run by fakeSession.Execute
		return &fakeQuery{desc: pgwire.Description{Columns: text}}, nil
	case upper == "SELECT * FROM MISSING":
		err := &fakeError{code: "42P01", msg: `relation "missing" does not exist`, hint: "check the name", pos: 15}
		return nil, fmt.Errorf("plan: %w", err)
	case upper == "BEGIN" || upper == "COMMIT" || upper == "ROLLBACK":
		return &fakeQuery{run: rows(nil, nil, upper)}, nil
	case strings.HasPrefix(upper, "CREATE SOURCE"):
		return &fakeQuery{run: rows(nil, nil, "CREATE SOURCE")}, nil
	case strings.HasPrefix(upper, "INSERT"):
		return &fakeQuery{run: rows(nil, nil, "INSERT 0 1")}, nil
	}

	m := echoRe.FindStringSubmatch(sql)
	if m == nil {
		return nil, &fakeError{code: "42601", msg: fmt.Sprintf("syntax error in %q", sql), pos: 1}
	}
	oid, ok := typeByName[strings.ToLower(m[2])]
	if !ok {
		return nil, &fakeError{code: "42704", msg: fmt.Sprintf("type %q does not exist", m[2])}
	}
	col := []pgwire.Column{{Name: "echo", OID: oid}}
	literal, isParam := m[1], m[1] == "$1"
	q := &fakeQuery{desc: pgwire.Description{Columns: col}}
	if isParam {
		q.desc.ParamOIDs = []uint32{oid}
	}
	q.run = func(_ context.Context, params []pgwire.Param) (*pgwire.Result, error) {
		var raw *string
		switch {
		case isParam && len(params) != 1:
			return nil, &fakeError{code: "08P01", msg: fmt.Sprintf("want 1 parameter, got %d", len(params))}
		case isParam && params[0].Value != nil:
			s := string(params[0].Value)
			raw = &s
		case !isParam && strings.EqualFold(literal, "null"):
		case !isParam && strings.HasPrefix(literal, "'"):
			s := strings.ReplaceAll(literal[1:len(literal)-1], "''", "'")
			raw = &s
		case !isParam:
			raw = &literal
		}
		if raw == nil {
			return &pgwire.Result{Columns: col, Rows: [][]any{{nil}}, Tag: "SELECT 1"}, nil
		}
		v, err := parseAs(*raw, oid)
		if err != nil {
			return nil, &fakeError{code: "22P02", msg: err.Error()}
		}
		return &pgwire.Result{Columns: col, Rows: [][]any{{v}}, Tag: "SELECT 1"}, nil
	}
	return q, nil
}

// timeLayouts are the text forms a timestamp parameter arrives in: pgx's
// text encoding and the wire layer's rendering of binary parameters.
var timeLayouts = []string{
	"2006-01-02 15:04:05.999999999Z07:00:00",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999Z07",
	"2006-01-02 15:04:05.999999999",
}

func parseAs(s string, oid uint32) (any, error) {
	switch oid {
	case pgwire.OIDInt8, pgwire.OIDInt4:
		return strconv.ParseInt(s, 10, 64)
	case pgwire.OIDFloat8:
		return strconv.ParseFloat(s, 64)
	case pgwire.OIDBool:
		switch strings.ToLower(s) {
		case "t", "true":
			return true, nil
		case "f", "false":
			return false, nil
		}
		return nil, fmt.Errorf("bad bool %q", s)
	case pgwire.OIDTimestamp, pgwire.OIDTimestampTZ:
		for _, l := range timeLayouts {
			if t, err := time.Parse(l, s); err == nil {
				return t.UTC(), nil
			}
		}
		return nil, fmt.Errorf("bad timestamp %q", s)
	}
	return s, nil
}

// startServer serves b on a loopback port until the test ends.
func startServer(t *testing.T, b pgwire.Backend, opts ...pgwire.Option) (*pgwire.Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := pgwire.NewServer(b, opts...)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := <-done; !errors.Is(err, pgwire.ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	return srv, ln.Addr().String()
}
