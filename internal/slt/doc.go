// Package slt parses and runs sqllogictest files against a server that speaks
// the PostgreSQL wire protocol, using pgx v5.
//
// The dialect is the one used by sqllogictest-rs (and, for the common subset,
// by CockroachDB, DuckDB and the original SQLite sqllogictest). Records are
// separated by blank lines; a line that contains only whitespace counts as
// blank.
//
// # Standard records
//
//	# comment
//	    Lines whose first non-blank character is '#' are ignored everywhere,
//	    including inside SQL text, EXCEPT inside the expected-results block of
//	    a query (after "----"), where such a line is an expected value.
//
//	statement ok
//	<SQL, one or more lines>
//	    The SQL must succeed.
//
//	statement error [<regex>]
//	<SQL>
//	    The SQL must fail with an error reported by the server (a
//	    pgconn.PgError). Connection loss, timeouts and other client-side
//	    errors do not count. If <regex> is given (the rest of the header
//	    line, whitespace runs collapsed to one space, as sqllogictest-rs
//	    does), it must match somewhere in the error text (search, not a full
//	    match). The error text is pgconn's PgError.Error():
//	        ERROR: <message> (SQLSTATE <code>)
//	    so "statement error SQLSTATE 42P01" checks the SQLSTATE and
//	    "statement error relation .* does not exist" checks the message.
//	    For portability with other runners, prefer regexes over the message
//	    only; SQLSTATE checks depend on the pgx error text.
//
//	statement count <N>
//	<SQL>
//	    The SQL must succeed and its command tag must report N rows affected.
//
//	query <types> [nosort|rowsort|valuesort] [<label>]
//	<SQL>
//	----
//	<expected lines>
//	    <types> has one letter per result column (conventionally T text,
//	    I integer, R float, B boolean; any letter is accepted). If the
//	    result has columns, their number must equal len(<types>). "query"
//	    with no type string skips that check. Without "----" the query
//	    must return no rows. <label> is accepted and ignored.
//
//	query error [<regex>]
//	<SQL>
//	    Like statement error, for a query.
//
//	statement ok|count <N> ... retry <N> backoff <duration>
//	query <types> [<sortmode>] [<label>] retry <N> backoff <duration>
//	    (sqllogictest-rs extension) On failure or mismatch, retry up to N
//	    more times, sleeping <duration> between attempts. Useful when
//	    results converge asynchronously.
//
//	skipif <engine>
//	onlyif <engine>
//	    Placed on lines before a record (any number of them). The record is
//	    skipped if an onlyif names a different engine or a skipif names the
//	    runner's engine (Options.Engine, default "turbinesql").
//
//	halt
//	    Stops the run successfully (conditions apply, as in SQLite's
//	    sqllogictest: "onlyif x" + "halt" halts only on engine x).
//
//	hash-threshold <N>
//	    Accepted and ignored: expected results in the hashed form are always
//	    checked by hash and plain results always value by value.
//
//	control sortmode nosort|rowsort|valuesort
//	    Sets the sort mode of subsequent queries that do not name one.
//
// Any other directive (e.g. "mode", "user", "subtest", "include", "system",
// other "control" lines) is a parse error naming file:line; nothing is
// silently ignored.
//
// # TurbineSQL-only directives
//
// Files that use these directives cannot be run by external runners:
//
//	restart
//	    Calls Options.Restart, which is expected to restart the server under
//	    test and return a fresh connection. Subsequent records use the
//	    returned connection. Run closes connections returned by Restart when
//	    they are replaced and when Run returns; it never closes the
//	    connection passed to Run. It is an error if Options.Restart is nil.
//
//	sleep <duration>
//	    Sleeps for a Go duration (time.ParseDuration: "200ms", "1s",
//	    "1m30s"). sqllogictest-rs also has a sleep record (humantime
//	    syntax); simple forms such as "200ms" and "2s" are accepted by both.
//
// # Execution and result formatting
//
// Statements are executed with pgx's (*pgx.Conn).Exec with no arguments
// (pgx then uses the simple protocol, so a statement may contain several
// SQL commands; "statement count" checks the last command tag).
//
// Queries are executed with the extended protocol (Parse/Bind/Describe/
// Execute via pgconn's ExecParams) requesting text result format for every
// column, so a query must be a single SQL statement. Each value is the
// server's text output byte for byte, which matches what
// sqllogictest-rs --engine postgres prints: bool "t"/"f", timestamps like
// "2026-01-01 00:01:00", floats as PostgreSQL prints them, etc. SQL NULL is
// rendered "NULL" and the empty string "(empty)". A row is its values
// joined by single spaces.
//
// Comparison follows sqllogictest-rs's default validator: both expected and
// actual lines are trimmed and runs of ASCII whitespace collapsed to a single
// space before comparing. In addition:
//
//   - nosort compares rows in order; rowsort sorts both the actual and the
//     expected lines (as strings) before comparing, so expected rows may be
//     written in any order (sqllogictest-rs sorts only the actual rows, so
//     files meant to be portable should list them sorted); valuesort
//     compares the sorted multiset of individual values, with expected
//     values written one per line (a row-per-line form is also accepted).
//   - Expected results may also use SQLite's value-per-line form (one value
//     per line, rows*columns lines) for multi-column queries.
//   - A single expected line "<N> values hashing to <md5>" is checked by
//     hashing the values (after sorting) as SQLite's sqllogictest does:
//     md5 of every value followed by "\n".
//   - In columns typed R, a value matches if it equals the expected value
//     after rounding to the number of decimal places written in the
//     expected value (so "0.333" matches 0.3333333333333333 and "1.5"
//     matches "1.50"). This is more lenient than sqllogictest-rs, which
//     compares the text exactly.
//
// Every failure is reported as an error of the form
//
//	file.slt:42: query result mismatch
//	SQL: SELECT ...
//	expected:
//	...
//	actual:
//	...
//	diff (-expected +actual):
//	...
package slt
