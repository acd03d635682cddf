package sql

import (
	"errors"
	"reflect"
	"testing"
)

// TestParseCopyFrom: COPY ... FROM STDIN with PostgreSQL's options in both
// forms, as psql's \copy and drivers send them, defaults filled in.
func TestParseCopyFrom(t *testing.T) {
	text := CopyFormat{Kind: CopyText, Delimiter: '\t', Null: `\N`}
	csv := CopyFormat{Kind: CopyCSV, Delimiter: ',', Null: "", Quote: '"', Escape: '"'}
	with := func(f CopyFormat, change func(*CopyFormat)) CopyFormat { change(&f); return f }
	for stmt, want := range map[string]*CopyIn{
		`COPY t FROM STDIN`:                   {Table: "t", TablePos: 6, Format: text},
		`copy "T" (a, "B") from stdin;`:       {Table: "T", TablePos: 6, Columns: []string{"a", "B"}, ColumnPos: []int{11, 14}, Format: text},
		`COPY public.t FROM STDIN csv header`: {Table: "t", TablePos: 13, Format: with(csv, func(f *CopyFormat) { f.Header = CopyHeaderSkip })},
		`COPY t FROM STDIN WITH CSV HEADER DELIMITER AS ';' NULL AS 'NA' QUOTE '''' ESCAPE AS '\'`: {Table: "t", TablePos: 6,
			Format: CopyFormat{Kind: CopyCSV, Delimiter: ';', Null: "NA", Quote: '\'', Escape: '\\', Header: CopyHeaderSkip}},
		`COPY t FROM STDIN DELIMITER '|' NULL ''`: {Table: "t", TablePos: 6, Format: with(text, func(f *CopyFormat) { f.Delimiter, f.Null = '|', "" })},
		`COPY t FROM STDIN (FORMAT csv, HEADER true, DELIMITER ',', NULL '', QUOTE '"', ESCAPE '"')`: {Table: "t", TablePos: 6,
			Format: with(csv, func(f *CopyFormat) { f.Header = CopyHeaderSkip })},
		`COPY t FROM STDIN WITH (FORMAT 'text', HEADER match, DELIMITER E'\t', ENCODING 'utf-8')`: {Table: "t", TablePos: 6,
			Format: with(text, func(f *CopyFormat) { f.Header = CopyHeaderMatch })},
		`COPY t FROM STDIN (HEADER off, FORMAT csv)`: {Table: "t", TablePos: 6, Format: csv},
	} {
		got, err := Parse(stmt)
		if err != nil {
			t.Errorf("%s: %v", stmt, err)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %#v\nwant %#v", stmt, got, want)
		}
	}
	for stmt, code := range map[string]string{
		`COPY t TO STDOUT`:                                 CodeNotSupported,
		`COPY t FROM '/tmp/f.csv'`:                         CodeNotSupported,
		`COPY t FROM PROGRAM 'cat'`:                        CodeNotSupported,
		`COPY t FROM STDIN WHERE a > 1`:                    CodeNotSupported,
		`COPY t FROM STDIN BINARY`:                         CodeNotSupported,
		`COPY t FROM STDIN (FORMAT binary)`:                CodeNotSupported,
		`COPY t FROM STDIN (FORMAT json)`:                  CodeInvalidParameter,
		`COPY t FROM STDIN (DELIMITER ',', DELIMITER ';')`: CodeSyntax,
		`COPY t FROM STDIN CSV CSV`:                        CodeSyntax,
		`COPY t FROM STDIN (FOO 1)`:                        CodeSyntax,
		`COPY t FROM STDIN (FORCE_NOT_NULL (a))`:           CodeNotSupported,
		`COPY t FROM STDIN CSV FORCE NOT NULL a`:           CodeNotSupported,
		`COPY t FROM STDIN (DELIMITER 'ab')`:               CodeNotSupported,
		`COPY t FROM STDIN (DELIMITER E'\n')`:              CodeInvalidParameter,
		`COPY t FROM STDIN (DELIMITER 'a')`:                CodeInvalidParameter,
		`COPY t FROM STDIN (NULL E'\r')`:                   CodeInvalidParameter,
		`COPY t FROM STDIN (QUOTE '"')`:                    CodeNotSupported,
		`COPY t FROM STDIN (ESCAPE '"')`:                   CodeNotSupported,
		`COPY t FROM STDIN (FORMAT csv, QUOTE ',')`:        CodeInvalidParameter,
		`COPY t FROM STDIN (FORMAT csv, NULL '"')`:         CodeInvalidParameter,
		`COPY t FROM STDIN (NULL 'a	b')`:                   CodeInvalidParameter,
		`COPY t FROM STDIN (HEADER perhaps)`:               CodeInvalidParameter,
		`COPY t FROM STDIN (ENCODING 'LATIN1')`:            CodeNotSupported,
		`COPY t (a, a) FROM STDIN`:                         CodeDuplicateColumn,
		`COPY t FROM STDIN DELIMITER ;`:                    CodeSyntax,
	} {
		_, err := Parse(stmt)
		var e *Error
		if !errors.As(err, &e) || e.Code != code {
			t.Errorf("%s: got %v, want SQLSTATE %s", stmt, err, code)
		}
	}
}
