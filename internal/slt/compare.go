package slt

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// resultSet is a query result with every value already rendered as text
// (see formatValue).
type resultSet struct {
	Columns int
	Rows    [][]string
}

// mismatch describes why a query result does not match its record.
type mismatch struct {
	Reason   string
	Expected []string // as displayed
	Actual   []string // as displayed
}

// formatValue renders one text-format value the way sqllogictest-rs's
// postgres engine does: NULL for SQL NULL, (empty) for the empty string,
// otherwise the server's text output unchanged.
func formatValue(v []byte) string {
	if v == nil {
		return "NULL"
	}
	if len(v) == 0 {
		return "(empty)"
	}
	return string(v)
}

func isASCIISpace(r rune) bool {
	return r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\f' || r == '\v'
}

// asciiFields splits s around runs of ASCII whitespace.
func asciiFields(s string) []string { return strings.FieldsFunc(s, isASCIISpace) }

// normalize trims s and collapses runs of ASCII whitespace into one space,
// like sqllogictest-rs's default normalizer.
func normalize(s string) string { return strings.Join(asciiFields(s), " ") }

func normalizeAll(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = normalize(l)
	}
	return out
}

// rowLines renders each row as its normalized values joined by single spaces.
func rowLines(rows [][]string) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		vals := make([]string, len(r))
		for j, v := range r {
			vals[j] = normalize(v)
		}
		out[i] = strings.Join(vals, " ")
	}
	return out
}

func sorted(lines []string) []string {
	out := slices.Clone(lines)
	slices.Sort(out)
	return out
}

var hashLineRE = regexp.MustCompile(`^(\d+) values hashing to ([0-9a-fA-F]{32})$`)

// hashValues returns the number of values and the md5 (hex) of every value
// followed by "\n", as SQLite's sqllogictest computes it. Rows are ordered
// according to mode first (rowsort: rows compared column by column).
func hashValues(rows [][]string, mode SortMode) (int, string) {
	var vals []string
	switch mode {
	case RowSort:
		rs := slices.Clone(rows)
		slices.SortStableFunc(rs, func(a, b []string) int { return slices.Compare(a, b) })
		for _, r := range rs {
			vals = append(vals, r...)
		}
	case ValueSort:
		for _, r := range rows {
			vals = append(vals, r...)
		}
		slices.Sort(vals)
	default:
		for _, r := range rows {
			vals = append(vals, r...)
		}
	}
	h := md5.New()
	for _, v := range vals {
		h.Write([]byte(v))
		h.Write([]byte("\n"))
	}
	return len(vals), hex.EncodeToString(h.Sum(nil))
}

// checkQuery compares a query result with the record's expectation. It
// returns nil if they match.
func checkQuery(rec *Record, res resultSet) *mismatch {
	if rec.Types != "" && res.Columns > 0 && len(rec.Types) != res.Columns {
		return &mismatch{
			Reason:   fmt.Sprintf("query column count mismatch: type string %q has %d columns, result has %d", rec.Types, len(rec.Types), res.Columns),
			Expected: rec.Expected,
			Actual:   rowLines(res.Rows),
		}
	}

	// "N values hashing to H".
	if len(rec.Expected) == 1 {
		if m := hashLineRE.FindStringSubmatch(normalize(rec.Expected[0])); m != nil {
			n, h := hashValues(res.Rows, rec.Sort)
			actual := fmt.Sprintf("%d values hashing to %s", n, h)
			if strconv.Itoa(n) == m[1] && strings.EqualFold(h, m[2]) {
				return nil
			}
			return &mismatch{Reason: "query result mismatch", Expected: []string{normalize(rec.Expected[0])}, Actual: []string{actual}}
		}
	}

	if rec.Sort == ValueSort {
		return checkValueSort(rec, res)
	}

	expNorm := normalizeAll(rec.Expected)
	exp, act := expNorm, rowLines(res.Rows)
	if rec.Sort == RowSort {
		exp, act = sorted(exp), sorted(act)
	}
	if linesMatch(rec.Types, exp, act) {
		return nil
	}
	// SQLite's value-per-line form: rows*columns lines of one value each.
	if cols := res.Columns; cols > 1 && len(rec.Expected) == len(res.Rows)*cols {
		grouped := make([]string, 0, len(res.Rows))
		for i := 0; i < len(expNorm); i += cols {
			grouped = append(grouped, strings.Join(expNorm[i:i+cols], " "))
		}
		if rec.Sort == RowSort {
			grouped = sorted(grouped)
		}
		if linesMatch(rec.Types, grouped, act) {
			return nil
		}
	}
	return &mismatch{Reason: "query result mismatch", Expected: exp, Actual: act}
}

func checkValueSort(rec *Record, res resultSet) *mismatch {
	var act []string
	for _, r := range res.Rows {
		for _, v := range r {
			act = append(act, normalize(v))
		}
	}
	act = sorted(act)
	exp := sorted(normalizeAll(rec.Expected))
	if slices.Equal(exp, act) {
		return nil
	}
	// Row-per-line expected values: compare individual whitespace-separated
	// tokens on both sides.
	var expTok, actTok []string
	for _, l := range exp {
		expTok = append(expTok, asciiFields(l)...)
	}
	for _, v := range act {
		actTok = append(actTok, asciiFields(v)...)
	}
	if slices.Equal(sorted(expTok), sorted(actTok)) {
		return nil
	}
	return &mismatch{Reason: "query result mismatch", Expected: exp, Actual: act}
}

// linesMatch compares normalized expected and actual lines pairwise; values
// in R columns may match numerically (see floatMatch).
func linesMatch(types string, exp, act []string) bool {
	if len(exp) != len(act) {
		return false
	}
	for i := range exp {
		if exp[i] != act[i] && !rowMatchR(types, exp[i], act[i]) {
			return false
		}
	}
	return true
}

func rowMatchR(types, exp, act string) bool {
	if !strings.ContainsRune(types, 'R') {
		return false
	}
	ef, af := asciiFields(exp), asciiFields(act)
	if len(ef) != len(types) || len(af) != len(types) {
		return false
	}
	for c := range ef {
		if ef[c] == af[c] {
			continue
		}
		if types[c] == 'R' && floatMatch(ef[c], af[c]) {
			continue
		}
		return false
	}
	return true
}

var plainDecimalRE = regexp.MustCompile(`^[+-]?[0-9]+(\.[0-9]+)?$`)

// floatMatch reports whether actual equals expected once rounded to the
// number of decimal places written in expected. Expected values in
// exponent notation (or NaN/Infinity) must be numerically equal.
func floatMatch(expected, actual string) bool {
	e, err := strconv.ParseFloat(expected, 64)
	if err != nil {
		return false
	}
	a, err := strconv.ParseFloat(actual, 64)
	if err != nil {
		return false
	}
	if e == a || (math.IsNaN(e) && math.IsNaN(a)) {
		return true
	}
	if !plainDecimalRE.MatchString(expected) || math.IsInf(a, 0) || math.IsNaN(a) {
		return false
	}
	decimals := 0
	if i := strings.IndexByte(expected, '.'); i >= 0 {
		decimals = len(expected) - i - 1
	}
	return roundText(e, decimals) == roundText(a, decimals)
}

func roundText(f float64, decimals int) string {
	s := strconv.FormatFloat(f, 'f', decimals, 64)
	if strings.HasPrefix(s, "-") && strings.Trim(s[1:], "0.") == "" {
		s = s[1:] // -0.000 == 0.000
	}
	return s
}

// errorMatches reports whether the error text matches the record's regex
// (search semantics; an empty regex matches anything).
func errorMatches(pattern, text string) (bool, error) {
	if pattern == "" {
		return true, nil
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return false, err
	}
	return re.MatchString(text), nil
}

const maxShownLines = 500

// formatMismatch renders expected, actual and a line diff.
func formatMismatch(m *mismatch) string {
	var b strings.Builder
	b.WriteString("expected:\n")
	writeLines(&b, m.Expected, "")
	b.WriteString("actual:\n")
	writeLines(&b, m.Actual, "")
	if d, ok := lineDiff(m.Expected, m.Actual); ok {
		b.WriteString("diff (-expected +actual):\n")
		writeLines(&b, d, "")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func writeLines(b *strings.Builder, lines []string, prefix string) {
	if len(lines) == 0 {
		b.WriteString(prefix + "<no rows>\n")
		return
	}
	for i, l := range lines {
		if i == maxShownLines {
			fmt.Fprintf(b, "%s... (%d more lines)\n", prefix, len(lines)-i)
			return
		}
		b.WriteString(prefix + l + "\n")
	}
}

// lineDiff returns a unified-looking line diff ("  " same, "- " expected
// only, "+ " actual only). ok is false when the inputs are too large.
func lineDiff(exp, act []string) (out []string, ok bool) {
	n, m := len(exp), len(act)
	if n*m > 4_000_000 {
		return nil, false
	}
	// lcs[i][j] = LCS length of exp[i:], act[j:].
	lcs := make([][]int32, n+1)
	for i := range lcs {
		lcs[i] = make([]int32, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if exp[i] == act[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && exp[i] == act[j]:
			out = append(out, "  "+exp[i])
			i++
			j++
		case i < n && (j == m || lcs[i+1][j] >= lcs[i][j+1]):
			out = append(out, "- "+exp[i])
			i++
		default:
			out = append(out, "+ "+act[j])
			j++
		}
	}
	return out, true
}
