package pgwire

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"
)

// SQLSTATE codes raised by the wire layer itself. Backend errors bring their
// own code through SQLState().
const (
	codeInternal                     = "XX000"
	codeProtocolViolation            = "08P01"
	codeFeatureNotSupported          = "0A000"
	codeSyntaxError                  = "42601"
	codeInvalidParameterValue        = "22023"
	codeInvalidBinaryRepr            = "22P03"
	codeInvalidTextRepr              = "22P02"
	codeNumericOutOfRange            = "22003"
	codeDatetimeOverflow             = "22008"
	codeDuplicatePreparedStmt        = "42P05"
	codeInvalidSQLStatementName      = "26000"
	codeDuplicateCursor              = "42P03"
	codeInvalidCursorName            = "34000"
	codeInvalidAuthorizationSpec     = "28000"
	codeObjectNotInPrerequisiteState = "55000"
	codeUndefinedObject              = "42704"
)

// ErrorResponse severities.
const (
	severityError = "ERROR"
	severityFatal = "FATAL" // the connection is closed after it
)

// wireError is an error detected by the wire layer (bad Bind, unknown portal,
// unencodable value, ...). It carries a SQLSTATE so it takes the same path to
// the client as a backend error.
type wireError struct {
	code string
	msg  string
}

func (e *wireError) Error() string    { return e.msg }
func (e *wireError) SQLState() string { return e.code }

func newWireError(code, format string, args ...any) error {
	return &wireError{code: code, msg: fmt.Sprintf(format, args...)}
}

// errorResponse builds the ErrorResponse for err. The SQLSTATE, hint and
// position are taken from anything in err's chain that provides them, so
// backends can wrap their errors freely.
func errorResponse(severity string, err error) *pgproto3.ErrorResponse {
	msg := err.Error()
	if msg == "" {
		// An empty message leaves users with nothing to go on.
		msg = "unknown error"
	}
	resp := &pgproto3.ErrorResponse{
		Severity:            severity,
		SeverityUnlocalized: severity,
		Code:                codeInternal,
		Message:             cstring(msg),
	}

	var st interface{ SQLState() string }
	if errors.As(err, &st) {
		// A malformed code would make clients misclassify the error; XX000 is
		// the honest fallback.
		if code := st.SQLState(); validSQLState(code) {
			resp.Code = code
		}
	}
	var h interface{ Hint() string }
	if errors.As(err, &h) {
		resp.Hint = cstring(h.Hint())
	}
	var w interface{ Where() string }
	if errors.As(err, &w) {
		// CONTEXT: which line of a COPY's data, for one.
		resp.Where = cstring(w.Where())
	}
	var p interface{ Position() int }
	if errors.As(err, &p) {
		if pos := p.Position(); pos > 0 && pos <= math.MaxInt32 {
			resp.Position = int32(pos)
		}
	}
	return resp
}

// validSQLState reports whether code looks like a SQLSTATE: five characters
// from [0-9A-Z].
func validSQLState(code string) bool {
	if len(code) != 5 {
		return false
	}
	for i := 0; i < len(code); i++ {
		c := code[i]
		if (c < '0' || c > '9') && (c < 'A' || c > 'Z') {
			return false
		}
	}
	return true
}

// cstring removes NUL bytes: protocol strings are NUL-terminated, so an
// embedded NUL would desynchronise the client's parser.
func cstring(s string) string {
	if strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(s, "\x00", "")
}
