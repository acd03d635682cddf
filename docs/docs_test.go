// Package docs holds the user documentation (README.md at the root of the
// repository and the pages beside this file) and the tests that keep it
// true: every SQL example runs against a real server, and every relative
// link resolves.
//
// How a page's SQL is run (TestDocsSQL):
//
//   - Every ```sql block, and every psql heredoc (`psql ... <<'SQL'` up to
//     the line `SQL`) inside a ```sh block, runs in document order, one
//     server per page (embedded broker, Pebble on disk, pgwire), one session
//     per page: a block may use what an earlier block of its page created.
//   - Statements are split at semicolons outside quotes and comments, and
//     each is sent alone (simple protocol, as psql sends it).
//   - Full-line comments right after a statement (no blank line between)
//     say what it gives, in psql's form, and are checked:
//     a result table (header, a line of dashes and pluses, rows, an
//     optional "(N rows)"), compared cell by cell after trimming, NULL
//     shown empty as psql shows it, "..." in a cell eliding as in messages;
//     "ERROR:  [SQLSTATE: ]message", which the statement must fail with;
//     "NOTICE:  message" or "WARNING:  message", which it must send; and
//     "DETAIL:" / "HINT:" lines under either. A message may elide with
//     "...": its pieces must appear in that order, the first at its start.
//     Any other comment is prose; one holding " | " that is not a table is
//     an error, so a mistyped result is never silently unchecked.
//   - A statement without an ERROR line must succeed.
//   - ```sql synopsis marks a grammar summary (it must hold "[", "|" or
//     "..."); ```sql norun: <reason> (or ```sh norun: <reason>) a block that
//     cannot run here, such as one that needs a second server; the reason is
//     required. Keep them rare.
package docs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/turbinesql/turbinesql/server"
)

// pages lists README.md and every docs/*.md, the README first.
func pages(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.md")
	if err != nil || len(files) == 0 {
		t.Fatalf("no docs/*.md found: %v", err)
	}
	return append([]string{"../README.md"}, files...)
}

func TestDocsSQL(t *testing.T) {
	for _, page := range pages(t) {
		t.Run(filepath.Base(page), func(t *testing.T) {
			t.Parallel()
			stmts, err := pageStatements(page)
			if err != nil {
				t.Fatal(err)
			}
			if len(stmts) == 0 {
				return
			}
			runStatements(t, stmts)
		})
	}
}

// stmt is one SQL statement of a page and what its comments say it gives.
type stmt struct {
	file string
	line int // of the statement's first line in the page
	sql  string
	want expect
}

func (s stmt) String() string { return fmt.Sprintf("%s:%d: %s", s.file, s.line, s.sql) }

type expect struct {
	err     *message  // the statement must fail so
	notices []message // NOTICEs and WARNINGs it must send, in any order
	table   *table    // the rows it must return
}

// message is an expected ERROR, NOTICE or WARNING.
type message struct {
	severity     string
	code         string // "" when not shown
	text         string // may elide with "..."
	detail, hint string // "" when not shown
}

type table struct {
	header []string
	rows   [][]string
	count  int // -1 when no "(N rows)" line
}

// line is one line of a page, with its 1-based number.
type line struct {
	n    int
	text string
}

// block is a fenced code block: its info string and its lines, with the
// fence's indentation removed.
type block struct {
	line  int
	info  string
	lines []line
}

var fenceRE = regexp.MustCompile("^(\\s*)(```+)(.*)$")

// codeBlocks returns the fenced code blocks of a markdown page.
func codeBlocks(text string) ([]block, error) {
	var out []block
	var cur *block
	var indent, fence string
	for i, l := range strings.Split(text, "\n") {
		n := i + 1
		if cur == nil {
			if m := fenceRE.FindStringSubmatch(l); m != nil {
				cur = &block{line: n, info: strings.TrimSpace(m[3])}
				indent, fence = m[1], m[2]
			}
			continue
		}
		if m := fenceRE.FindStringSubmatch(l); m != nil && m[2] == fence && strings.TrimSpace(m[3]) == "" {
			out = append(out, *cur)
			cur = nil
			continue
		}
		cur.lines = append(cur.lines, line{n, strings.TrimPrefix(l, indent)})
	}
	if cur != nil {
		return nil, fmt.Errorf("line %d: code block never closed", cur.line)
	}
	return out, nil
}

var heredocRE = regexp.MustCompile(`\bpsql\b.*<<-?\s*'?SQL'?\s*$`)

// pageStatements returns the statements a page runs, in order.
func pageStatements(page string) ([]stmt, error) {
	data, err := os.ReadFile(page)
	if err != nil {
		return nil, err
	}
	name := filepath.Base(page)
	blocks, err := codeBlocks(string(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var out []stmt
	for _, b := range blocks {
		lang, mark, _ := strings.Cut(b.info, " ")
		mark = strings.TrimSpace(mark)
		switch {
		case strings.HasPrefix(mark, "norun"):
			if reason := strings.TrimSpace(strings.TrimLeft(strings.TrimPrefix(mark, "norun"), ":")); reason == "" {
				return nil, fmt.Errorf("%s:%d: a norun block must say why it cannot run: ```%s norun: <reason>", name, b.line, lang)
			}
			continue
		case mark == "synopsis":
			body := joinLines(b.lines)
			if lang != "sql" || !strings.ContainsAny(body, "[|") && !strings.Contains(body, "...") {
				return nil, fmt.Errorf("%s:%d: a synopsis is grammar: it shows [optional], a | b or ... somewhere", name, b.line)
			}
			continue
		case mark != "":
			return nil, fmt.Errorf("%s:%d: unknown mark %q on a code block (norun: <reason>, synopsis)", name, b.line, mark)
		}
		var script [][]line
		switch lang {
		case "sql":
			script = append(script, b.lines)
		case "sh", "bash", "shell":
			script = heredocs(b.lines)
		}
		for _, lines := range script {
			ss, err := splitStatements(name, lines)
			if err != nil {
				return nil, err
			}
			out = append(out, ss...)
		}
	}
	return out, nil
}

// heredocs returns the bodies of the psql heredocs in a shell block.
func heredocs(lines []line) [][]line {
	var out [][]line
	for i := 0; i < len(lines); i++ {
		if !heredocRE.MatchString(lines[i].text) {
			continue
		}
		var body []line
		for i++; i < len(lines) && strings.TrimSpace(lines[i].text) != "SQL"; i++ {
			body = append(body, lines[i])
		}
		out = append(out, body)
	}
	return out
}

func joinLines(ls []line) string {
	var b strings.Builder
	for _, l := range ls {
		b.WriteString(l.text)
		b.WriteByte('\n')
	}
	return b.String()
}

// splitStatements splits SQL lines into statements at semicolons outside
// quotes and comments, and reads each statement's expectations from the
// full-line comments right after it.
func splitStatements(file string, lines []line) ([]stmt, error) {
	var out []stmt
	var cur strings.Builder
	start := 0
	var notes []line
	inBlockComment := false
	flushNotes := func() error {
		if len(out) == 0 || len(notes) == 0 {
			notes = nil
			return nil
		}
		last := &out[len(out)-1]
		w, err := parseExpect(notes)
		if err != nil {
			return fmt.Errorf("%s:%d: %w", file, notes[0].n, err)
		}
		last.want = w
		notes = nil
		return nil
	}
	// afterStmt is true while the comments read belong to the statement
	// that just ended.
	afterStmt := false
	for _, l := range lines {
		trimmed := strings.TrimSpace(l.text)
		if cur.Len() == 0 && !inBlockComment {
			if strings.HasPrefix(trimmed, "--") {
				if afterStmt {
					notes = append(notes, l)
				}
				continue
			}
			if trimmed == "" {
				if err := flushNotes(); err != nil {
					return nil, err
				}
				afterStmt = false
				continue
			}
		}
		if err := flushNotes(); err != nil {
			return nil, err
		}
		afterStmt = false
		s := l.text
		var quote rune // ' or " while inside one
		escapes := false
		for i := 0; i < len(s); i++ {
			c := s[i]
			switch {
			case inBlockComment:
				if strings.HasPrefix(s[i:], "*/") {
					inBlockComment = false
					i++
				}
				continue
			case quote != 0:
				if escapes && c == '\\' && i+1 < len(s) {
					cur.WriteByte(c)
					cur.WriteByte(s[i+1])
					i++
					continue
				}
				if rune(c) == quote {
					if i+1 < len(s) && s[i+1] == c { // doubled quote
						cur.WriteString(s[i : i+2])
						i++
						continue
					}
					quote = 0
				}
			case strings.HasPrefix(s[i:], "--"):
				i = len(s) // an inline comment: prose
				continue
			case strings.HasPrefix(s[i:], "/*"):
				inBlockComment = true
				i++
				continue
			case c == '\'' || c == '"':
				quote = rune(c)
				escapes = c == '\'' && i > 0 && (s[i-1] == 'E' || s[i-1] == 'e') &&
					(i == 1 || !isIdent(s[i-2]))
			case c == ';':
				if sql := strings.TrimSpace(cur.String()); sql != "" {
					out = append(out, stmt{file: file, line: start, sql: sql})
				}
				cur.Reset()
				afterStmt = true
				continue
			}
			if cur.Len() == 0 {
				if unicode.IsSpace(rune(c)) {
					continue
				}
				start = l.n
			}
			cur.WriteByte(c)
		}
		if quote != 0 {
			// A string may span lines: the split above is per line, so
			// carry the quote over by re-reading the next line inside it.
			return nil, fmt.Errorf("%s:%d: a quoted string spans lines; keep each string on one line", file, l.n)
		}
		if cur.Len() > 0 {
			cur.WriteByte('\n')
		}
	}
	if err := flushNotes(); err != nil {
		return nil, err
	}
	if sql := strings.TrimSpace(cur.String()); sql != "" {
		return nil, fmt.Errorf("%s:%d: statement without a closing semicolon: %s", file, start, sql)
	}
	return out, nil
}

func isIdent(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

var (
	separatorRE = regexp.MustCompile(`^-+(\+-+)*$`)
	rowCountRE  = regexp.MustCompile(`^\((\d+) rows?\)$`)
	messageRE   = regexp.MustCompile(`^(ERROR|NOTICE|WARNING|DETAIL|HINT):\s+(?:([0-9A-Z]{5}):\s+)?(.*)$`)
)

// parseExpect reads what the comments after a statement say it gives.
func parseExpect(notes []line) (expect, error) {
	var w expect
	texts := make([]string, len(notes))
	for i, l := range notes {
		texts[i] = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l.text), "--"))
	}
	var last *message
	for i := 0; i < len(texts); i++ {
		s := texts[i]
		if m := messageRE.FindStringSubmatch(s); m != nil {
			switch m[1] {
			case "DETAIL", "HINT":
				if last == nil {
					return w, fmt.Errorf("%s: line without an ERROR, NOTICE or WARNING above it", m[1])
				}
				if m[1] == "DETAIL" {
					last.detail = m[3]
				} else {
					last.hint = m[3]
				}
			case "ERROR":
				if w.err != nil {
					return w, errors.New("two ERROR lines for one statement")
				}
				w.err = &message{severity: m[1], code: m[2], text: m[3]}
				last = w.err
			default:
				w.notices = append(w.notices, message{severity: m[1], code: m[2], text: m[3]})
				last = &w.notices[len(w.notices)-1]
			}
			continue
		}
		if i+1 < len(texts) && separatorRE.MatchString(texts[i+1]) {
			if w.table != nil {
				return w, errors.New("two result tables for one statement")
			}
			tb := &table{header: cells(s), count: -1}
			for i += 2; i < len(texts); i++ {
				if m := rowCountRE.FindStringSubmatch(texts[i]); m != nil {
					fmt.Sscan(m[1], &tb.count)
					break
				}
				row := cells(texts[i])
				if len(row) != len(tb.header) {
					return w, fmt.Errorf("result row %q has %d cells, its header %d", texts[i], len(row), len(tb.header))
				}
				tb.rows = append(tb.rows, row)
			}
			if tb.count >= 0 && tb.count != len(tb.rows) {
				return w, fmt.Errorf("result says (%d rows) but shows %d", tb.count, len(tb.rows))
			}
			w.table = tb
			continue
		}
		if strings.Contains(s, " | ") {
			return w, fmt.Errorf("%q looks like a result row but is not under a header and a line of dashes", s)
		}
	}
	return w, nil
}

func cells(s string) []string {
	parts := strings.Split(s, "|")
	for i, p := range parts {
		parts[i] = strings.TrimSpace(p)
	}
	return parts
}

// matchElided reports whether s matches pattern, whose "..." stand for
// anything: its pieces appear in s in order, the first at its start.
func matchElided(pattern, s string) bool {
	pieces := strings.Split(pattern, "...")
	if !strings.HasPrefix(s, pieces[0]) {
		return false
	}
	s = s[len(pieces[0]):]
	for _, p := range pieces[1:] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return true
}

func runStatements(t *testing.T, stmts []stmt) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := server.Start(ctx, server.Config{
		DataDir: t.TempDir(), PGAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", KafkaAddr: "127.0.0.1:0",
		// The app id `make run` gives, so internal topic names in the
		// docs are the ones a user sees.
		AppID:  server.DefaultAppID,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatalf("start server: %v", err)
	}
	defer srv.Close()
	cfg, err := pgx.ParseConfig("postgres://turbine@" + srv.PGAddr() + "/turbine?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	var notices []*pgconn.Notice
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { notices = append(notices, n) }
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.Background())
	for _, s := range stmts {
		notices = notices[:0]
		results, err := execute(ctx, conn.PgConn(), s.sql)
		// Go on after a mismatch: the page's later statements usually
		// still run, and one run then shows every result to fix.
		if msg := check(s, results, err, notices); msg != "" {
			t.Errorf("%s\n%s", s, msg)
		}
	}
}

// execute runs sql with the simple protocol, as psql does, and reads every
// result. pgconn's own ReadAll keeps a result's columns only when it has a
// row, and an empty result's header is something a page shows.
func execute(ctx context.Context, conn *pgconn.PgConn, sql string) ([]*pgconn.Result, error) {
	var out []*pgconn.Result
	mrr := conn.Exec(ctx, sql)
	for mrr.NextResult() {
		rr := mrr.ResultReader()
		res := &pgconn.Result{FieldDescriptions: append([]pgconn.FieldDescription(nil), rr.FieldDescriptions()...)}
		for rr.NextRow() {
			var row [][]byte
			for _, v := range rr.Values() {
				if v != nil {
					v = append([]byte{}, v...)
				}
				row = append(row, v)
			}
			res.Rows = append(res.Rows, row)
		}
		res.CommandTag, res.Err = rr.Close()
		out = append(out, res)
	}
	return out, mrr.Close()
}

// check compares what a statement gave with what its page says; it
// returns "" when they agree.
func check(s stmt, results []*pgconn.Result, err error, notices []*pgconn.Notice) string {
	var pgErr *pgconn.PgError
	if err != nil && !errors.As(err, &pgErr) {
		return fmt.Sprintf("failed without a server error: %v", err)
	}
	if s.want.err == nil && pgErr != nil {
		return fmt.Sprintf("failed: ERROR:  %s: %s (the page shows no ERROR for it)", pgErr.Code, pgErr.Message)
	}
	if w := s.want.err; w != nil {
		if pgErr == nil {
			return fmt.Sprintf("succeeded; the page says it fails with ERROR:  %s", w.text)
		}
		if msg := compareMessage(*w, pgErr.Code, pgErr.Message, pgErr.Detail, pgErr.Hint); msg != "" {
			return msg
		}
	}
	used := make([]bool, len(notices))
	for _, w := range s.want.notices {
		found := false
		var seen []string
		for i, n := range notices {
			if used[i] || n.Severity != w.severity {
				continue
			}
			if compareMessage(w, n.Code, n.Message, n.Detail, n.Hint) == "" {
				used[i], found = true, true
				break
			}
			seen = append(seen, fmt.Sprintf("%s:  %s: %s", n.Severity, n.Code, n.Message))
		}
		if !found {
			return fmt.Sprintf("sent no %s:  %s\n(it sent: %s)", w.severity, w.text, strings.Join(seen, "; "))
		}
	}
	if w := s.want.table; w != nil {
		var res *pgconn.Result
		for _, r := range results {
			if len(r.FieldDescriptions) > 0 {
				res = r
			}
		}
		if res == nil {
			return "returned no rows; the page shows a result"
		}
		if msg := compareTable(*w, res); msg != "" {
			return msg + "\nactual:\n" + psqlTable(res)
		}
	}
	return ""
}

func compareMessage(w message, code, text, detail, hint string) string {
	switch {
	case w.code != "" && w.code != code:
		return fmt.Sprintf("%s with SQLSTATE %s: %s; the page says %s", w.severity, code, text, w.code)
	case !matchElided(w.text, text):
		return fmt.Sprintf("%s:  %s: %s\nthe page says: %s", w.severity, code, text, w.text)
	case w.detail != "" && !matchElided(w.detail, detail):
		return fmt.Sprintf("DETAIL:  %s\nthe page says: %s", detail, w.detail)
	case w.hint != "" && !matchElided(w.hint, hint):
		return fmt.Sprintf("HINT:  %s\nthe page says: %s", hint, w.hint)
	}
	return ""
}

func compareTable(w table, res *pgconn.Result) string {
	var names []string
	for _, f := range res.FieldDescriptions {
		names = append(names, f.Name)
	}
	if strings.Join(names, "|") != strings.Join(w.header, "|") {
		return fmt.Sprintf("columns %v; the page shows %v", names, w.header)
	}
	if len(res.Rows) != len(w.rows) {
		return fmt.Sprintf("%d rows; the page shows %d", len(res.Rows), len(w.rows))
	}
	for i, row := range res.Rows {
		for j, v := range row {
			if want := w.rows[i][j]; !matchElided(want, strings.TrimSpace(string(v))) {
				return fmt.Sprintf("row %d, column %s: %q; the page shows %q", i+1, names[j], v, want)
			}
		}
	}
	return ""
}

// psqlTable renders a result as psql's aligned output in comments, ready
// to paste under the statement.
func psqlTable(res *pgconn.Result) string {
	n := len(res.FieldDescriptions)
	width := make([]int, n)
	numeric := make([]bool, n)
	for j, f := range res.FieldDescriptions {
		width[j] = utf8.RuneCountInString(f.Name)
		switch f.DataTypeOID {
		case 20, 21, 23, 700, 701, 1700: // int8, int2, int4, float4, float8, numeric
			numeric[j] = true
		}
	}
	for _, row := range res.Rows {
		for j, v := range row {
			width[j] = max(width[j], utf8.RuneCountInString(string(v)))
		}
	}
	var b strings.Builder
	cellsOut := func(vals []string, align func(j int) bool) {
		b.WriteString("-- ")
		for j, v := range vals {
			if j > 0 {
				b.WriteString(" |")
			}
			pad := strings.Repeat(" ", width[j]-utf8.RuneCountInString(v))
			if align(j) {
				b.WriteString(" " + pad + v)
			} else {
				b.WriteString(" " + v + pad)
			}
		}
		b.WriteString("\n")
	}
	var head []string
	for j, f := range res.FieldDescriptions {
		name := f.Name
		left := (width[j] - utf8.RuneCountInString(name)) / 2
		head = append(head, strings.Repeat(" ", left)+name)
	}
	cellsOut(head, func(int) bool { return false })
	b.WriteString("-- ")
	for j := range width {
		if j > 0 {
			b.WriteString("+")
		}
		b.WriteString(strings.Repeat("-", width[j]+2))
	}
	b.WriteString("\n")
	for _, row := range res.Rows {
		vals := make([]string, len(row))
		for j, v := range row {
			vals[j] = string(v)
		}
		cellsOut(vals, func(j int) bool { return numeric[j] })
	}
	if len(res.Rows) == 1 {
		b.WriteString("-- (1 row)\n")
	} else {
		fmt.Fprintf(&b, "-- (%d rows)\n", len(res.Rows))
	}
	return b.String()
}

// TestDocsLinks: every relative link of README.md and docs/*.md names a
// file of the repository, and its #anchor, if any, a heading of the page it
// points to (GitHub's anchors: the heading's text in lower case, spaces as
// dashes, punctuation dropped).
func TestDocsLinks(t *testing.T) {
	checked := 0
	for _, page := range pages(t) {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range links(string(data)) {
			target, anchor, _ := strings.Cut(l.target, "#")
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			path := page
			if target != "" {
				path = filepath.Join(filepath.Dir(page), target)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s:%d: link to %s: no such file", page, l.line, l.target)
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			anchors, err := headingAnchors(path)
			if err != nil {
				t.Fatal(err)
			}
			if !anchors[anchor] {
				t.Errorf("%s:%d: link to %s: %s has no heading whose anchor is #%s", page, l.line, l.target, path, anchor)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found: the README links to docs/")
	}
}

type link struct {
	line   int
	target string
}

var (
	linkRE     = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	codeSpanRE = regexp.MustCompile("`[^`]*`")
	headingRE  = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
)

// links returns the links of a markdown page outside code.
func links(text string) []link {
	var out []link
	inFence := false
	for i, l := range strings.Split(text, "\n") {
		if fenceRE.MatchString(l) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range linkRE.FindAllStringSubmatch(codeSpanRE.ReplaceAllString(l, ""), -1) {
			out = append(out, link{i + 1, m[1]})
		}
	}
	return out
}

// headingAnchors returns the anchors GitHub gives a page's headings.
func headingAnchors(path string) (map[string]bool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, l := range strings.Split(string(data), "\n") {
		if fenceRE.MatchString(l) {
			inFence = !inFence
			continue
		}
		m := headingRE.FindStringSubmatch(l)
		if inFence || m == nil {
			continue
		}
		a := slug(m[1])
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out, nil
}

// slug is GitHub's anchor for a heading's text.
func slug(heading string) string {
	heading = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}
