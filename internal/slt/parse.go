package slt

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Kind is the type of a record.
type Kind int

// Record kinds.
const (
	KindStatementOK    Kind = iota + 1 // statement ok
	KindStatementError                 // statement error [regex]
	KindStatementCount                 // statement count N
	KindQuery                          // query <types> ... ---- results
	KindQueryError                     // query error [regex]
	KindHalt                           // halt
	KindSleep                          // sleep <duration> (TurbineSQL/sqllogictest-rs)
	KindRestart                        // restart (TurbineSQL only)
)

func (k Kind) String() string {
	switch k {
	case KindStatementOK:
		return "statement ok"
	case KindStatementError:
		return "statement error"
	case KindStatementCount:
		return "statement count"
	case KindQuery:
		return "query"
	case KindQueryError:
		return "query error"
	case KindHalt:
		return "halt"
	case KindSleep:
		return "sleep"
	case KindRestart:
		return "restart"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// SortMode says how query results are ordered before comparison.
type SortMode int

// Sort modes.
const (
	NoSort SortMode = iota
	RowSort
	ValueSort
)

func (m SortMode) String() string {
	switch m {
	case NoSort:
		return "nosort"
	case RowSort:
		return "rowsort"
	case ValueSort:
		return "valuesort"
	}
	return fmt.Sprintf("SortMode(%d)", int(m))
}

func parseSortMode(s string) (SortMode, bool) {
	switch s {
	case "nosort":
		return NoSort, true
	case "rowsort":
		return RowSort, true
	case "valuesort":
		return ValueSort, true
	}
	return NoSort, false
}

// Condition is a skipif/onlyif line attached to a record.
type Condition struct {
	OnlyIf bool   // true: onlyif; false: skipif
	Engine string // engine name (label)
}

func (c Condition) String() string {
	if c.OnlyIf {
		return "onlyif " + c.Engine
	}
	return "skipif " + c.Engine
}

// Record is one executable record of a sqllogictest file.
type Record struct {
	Kind       Kind
	Line       int         // 1-based line of the record's header
	Conditions []Condition // skipif/onlyif lines preceding the record

	// SQL is the statement or query text (statement and query kinds).
	SQL string
	// ErrorRegex is the expected error pattern (KindStatementError,
	// KindQueryError); empty means any server error.
	ErrorRegex string
	// Count is the expected rows-affected count (KindStatementCount).
	Count int64

	// Types is the query's type string, one letter per column (KindQuery).
	Types string
	// Sort is the query's sort mode (KindQuery).
	Sort SortMode
	// Label is the query's label, if any (KindQuery); it is not used.
	Label string
	// Expected holds the raw lines after "----" (KindQuery).
	Expected []string

	// Duration is the sleep duration (KindSleep).
	Duration time.Duration

	// Retry is the number of extra attempts after a failure and
	// RetryBackoff the pause between attempts ("retry N backoff D").
	Retry        int
	RetryBackoff time.Duration
}

// ParseFile reads and parses a sqllogictest file.
func ParseFile(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Parse(path, f)
}

// Parse parses a sqllogictest script. name is used in error messages.
func Parse(name string, r io.Reader) ([]Record, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p := &parser{name: name}
	text := string(bytes.TrimPrefix(data, []byte("\ufeff")))
	p.lines = strings.Split(text, "\n")
	for i, l := range p.lines {
		p.lines[i] = strings.TrimSuffix(l, "\r")
	}
	// A trailing newline does not start another line.
	if n := len(p.lines); n > 0 && p.lines[n-1] == "" {
		p.lines = p.lines[:n-1]
	}
	if err := p.parse(); err != nil {
		return nil, err
	}
	return p.records, nil
}

type parser struct {
	name        string
	lines       []string
	pos         int // index of the next line to read
	records     []Record
	defaultSort SortMode
}

func (p *parser) errorf(line int, format string, args ...any) error {
	return fmt.Errorf("%s:%d: %s", p.name, line, fmt.Sprintf(format, args...))
}

func isBlank(s string) bool { return strings.TrimSpace(s) == "" }

func isComment(s string) bool { return strings.HasPrefix(strings.TrimSpace(s), "#") }

func (p *parser) parse() error {
	var conds []Condition
	condLine := 0
	for p.pos < len(p.lines) {
		raw := p.lines[p.pos]
		lineNo := p.pos + 1
		p.pos++
		if isBlank(raw) || isComment(raw) {
			continue
		}
		fields := strings.Fields(raw)
		rec := Record{Line: lineNo}
		switch fields[0] {
		case "skipif", "onlyif":
			if len(fields) != 2 {
				return p.errorf(lineNo, "%s needs exactly one engine name: %q", fields[0], raw)
			}
			if len(conds) == 0 {
				condLine = lineNo
			}
			conds = append(conds, Condition{OnlyIf: fields[0] == "onlyif", Engine: fields[1]})
			continue

		case "statement":
			if err := p.parseStatementHeader(&rec, raw, fields[1:]); err != nil {
				return err
			}
			sql, delim, err := p.readSQL(lineNo)
			if err != nil {
				return err
			}
			if delim {
				if rec.Kind == KindStatementError {
					return p.errorf(lineNo, "multi-line expected errors (\"----\" after statement error) are not supported; use an inline regex")
				}
				return p.errorf(lineNo, "statement has a \"----\" results section; use query instead")
			}
			rec.SQL = sql

		case "query":
			if err := p.parseQueryHeader(&rec, raw, fields[1:]); err != nil {
				return err
			}
			sql, delim, err := p.readSQL(lineNo)
			if err != nil {
				return err
			}
			rec.SQL = sql
			if delim {
				if rec.Kind == KindQueryError {
					return p.errorf(lineNo, "multi-line expected errors (\"----\" after query error) are not supported; use an inline regex")
				}
				rec.Expected = p.readResults()
			}

		case "halt":
			if len(fields) != 1 {
				return p.errorf(lineNo, "unexpected tokens after halt: %q", raw)
			}
			rec.Kind = KindHalt

		case "restart":
			if len(fields) != 1 {
				return p.errorf(lineNo, "unexpected tokens after restart: %q", raw)
			}
			rec.Kind = KindRestart

		case "sleep":
			if len(fields) != 2 {
				return p.errorf(lineNo, "sleep needs exactly one duration: %q", raw)
			}
			d, err := time.ParseDuration(fields[1])
			if err != nil || d < 0 {
				return p.errorf(lineNo, "invalid sleep duration %q", fields[1])
			}
			rec.Kind = KindSleep
			rec.Duration = d

		case "hash-threshold":
			if len(fields) != 2 {
				return p.errorf(lineNo, "hash-threshold needs exactly one number: %q", raw)
			}
			if _, err := strconv.ParseUint(fields[1], 10, 64); err != nil {
				return p.errorf(lineNo, "invalid hash-threshold %q", fields[1])
			}
			continue // accepted and ignored

		case "control":
			if len(fields) == 3 && fields[1] == "sortmode" {
				m, ok := parseSortMode(fields[2])
				if !ok {
					return p.errorf(lineNo, "invalid sort mode %q", fields[2])
				}
				p.defaultSort = m
				continue
			}
			return p.errorf(lineNo, "unsupported control directive: %q", raw)

		default:
			return p.errorf(lineNo, "unknown or unsupported directive: %q", raw)
		}
		rec.Conditions = conds
		conds = nil
		p.records = append(p.records, rec)
	}
	if len(conds) > 0 {
		return p.errorf(condLine, "%s is not followed by a record", conds[0])
	}
	return nil
}

func (p *parser) parseStatementHeader(rec *Record, raw string, args []string) error {
	if len(args) == 0 {
		return p.errorf(rec.Line, "statement needs ok, error or count: %q", raw)
	}
	var rest []string
	switch args[0] {
	case "ok":
		rec.Kind = KindStatementOK
		rest = args[1:]
	case "error":
		rec.Kind = KindStatementError
		return p.setErrorRegex(rec, args[1:])
	case "count":
		if len(args) < 2 {
			return p.errorf(rec.Line, "statement count needs a number: %q", raw)
		}
		n, err := strconv.ParseInt(args[1], 10, 64)
		if err != nil || n < 0 {
			return p.errorf(rec.Line, "invalid statement count %q", args[1])
		}
		rec.Kind = KindStatementCount
		rec.Count = n
		rest = args[2:]
	default:
		return p.errorf(rec.Line, "statement needs ok, error or count, got %q", args[0])
	}
	return p.parseRetry(rec, rest)
}

func (p *parser) parseQueryHeader(rec *Record, raw string, args []string) error {
	if len(args) > 0 && args[0] == "error" {
		rec.Kind = KindQueryError
		return p.setErrorRegex(rec, args[1:])
	}
	rec.Kind = KindQuery
	rec.Sort = p.defaultSort
	if len(args) > 0 && args[0] != "retry" {
		rec.Types = args[0]
		args = args[1:]
		if len(args) > 0 {
			if m, ok := parseSortMode(args[0]); ok {
				rec.Sort = m
				args = args[1:]
			}
		}
		if len(args) > 0 && args[0] != "retry" {
			rec.Label = args[0]
			args = args[1:]
		}
	}
	return p.parseRetry(rec, args)
}

func (p *parser) setErrorRegex(rec *Record, tokens []string) error {
	re := strings.Join(tokens, " ")
	if _, err := regexp.Compile(re); err != nil {
		return p.errorf(rec.Line, "invalid error regex %q: %v", re, err)
	}
	rec.ErrorRegex = re
	return nil
}

// parseRetry parses an optional "retry <N> backoff <duration>" suffix.
func (p *parser) parseRetry(rec *Record, args []string) error {
	if len(args) == 0 {
		return nil
	}
	if args[0] != "retry" {
		return p.errorf(rec.Line, "unexpected token %q in %s header", args[0], rec.Kind)
	}
	if len(args) != 4 || args[2] != "backoff" {
		return p.errorf(rec.Line, "malformed retry clause, want \"retry <N> backoff <duration>\"")
	}
	n, err := strconv.Atoi(args[1])
	if err != nil || n <= 0 {
		return p.errorf(rec.Line, "invalid retry count %q", args[1])
	}
	d, err := time.ParseDuration(args[3])
	if err != nil || d < 0 {
		return p.errorf(rec.Line, "invalid retry backoff %q", args[3])
	}
	rec.Retry, rec.RetryBackoff = n, d
	return nil
}

// readSQL reads SQL lines up to a blank line, EOF or a "----" line (in which
// case delim is true). Comment lines are dropped.
func (p *parser) readSQL(header int) (sql string, delim bool, err error) {
	var lines []string
	for p.pos < len(p.lines) {
		l := p.lines[p.pos]
		if isBlank(l) {
			break
		}
		p.pos++
		if strings.TrimSpace(l) == "----" {
			delim = true
			break
		}
		if isComment(l) {
			continue
		}
		lines = append(lines, l)
	}
	if len(lines) == 0 {
		return "", false, p.errorf(header, "record has no SQL")
	}
	return strings.Join(lines, "\n"), delim, nil
}

// readResults reads expected result lines up to a blank line or EOF. The
// lines are kept verbatim (comparison normalizes whitespace).
func (p *parser) readResults() []string {
	var out []string
	for p.pos < len(p.lines) {
		l := p.lines[p.pos]
		if isBlank(l) {
			break
		}
		p.pos++
		out = append(out, l)
	}
	return out
}
