package sql

import (
	"errors"
	"fmt"
)

// SQLSTATE codes the engine reports. They are attached by wrapping (an
// *Error carries one) and resolved once, at the wire.
const (
	CodeSyntax           = "42601"
	CodeUndefinedTable   = "42P01"
	CodeUndefinedColumn  = "42703"
	CodeDuplicateObject  = "42P07"
	CodeInvalidParameter = "22023"
	CodeNotSupported     = "0A000"
	CodeDataException    = "22000"
	CodeDivisionByZero   = "22012"
	CodeDependentObjects = "2BP01"
	CodeGrouping         = "42803"
	CodeDatatypeMismatch = "42804"
	CodeUndefinedFunc    = "42883"
	CodeInternal         = "XX000"
	CodeObjectInUse      = "55006"
	CodeNotInPrereqState = "55000"
	CodeInsufficientPriv = "42501"
	CodeUndefinedObject  = "42704"
	CodeWrongObjectType  = "42809"
	CodeNotNullViolation = "23502"

	// Data exceptions of the scalar functions, as PostgreSQL reports them.
	CodeNumericOutOfRange    = "22003"
	CodeInvalidDatetimeFmt   = "22007"
	CodeDatetimeOutOfRange   = "22008"
	CodeNullNotAllowed       = "22004" // null value not allowed (format('%I', NULL))
	CodeInvalidArgLog        = "2201E" // invalid argument for logarithm
	CodeInvalidArgPower      = "2201F" // invalid argument for power function (sqrt too)
	CodeInvalidArgWidthBkt   = "2201G" // invalid argument for width_bucket
	CodeInvalidRegex         = "2201B"
	CodeSubstringError       = "22011"
	CodeProgramLimitExceeded = "54000" // chr(0), a result too long
)

// Error is a user-facing error with a SQLSTATE, an optional hint saying what
// to do, and an optional 1-based character position in the statement.
type Error struct {
	Code    string
	Message string
	HintMsg string
	Pos     int
	// Context says where in the statement's input the error arose, as
	// PostgreSQL's CONTEXT line does: "COPY t, line 3, column b: "x"".
	Context string
	Err     error // wrapped cause, if any
}

func (e *Error) Error() string    { return e.Message }
func (e *Error) SQLState() string { return e.Code }
func (e *Error) Hint() string     { return e.HintMsg }
func (e *Error) Position() int    { return e.Pos }
func (e *Error) Where() string    { return e.Context }
func (e *Error) Unwrap() error    { return e.Err }

// Errorf builds an *Error with a SQLSTATE.
func Errorf(code, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	return &Error{Code: code, Message: err.Error(), Err: errors.Unwrap(err)}
}

// WithHint returns e with a hint attached.
func (e *Error) WithHint(format string, args ...any) *Error {
	e.HintMsg = fmt.Sprintf(format, args...)
	return e
}

// WithContext returns e with a CONTEXT line attached.
func (e *Error) WithContext(format string, args ...any) *Error {
	e.Context = fmt.Sprintf(format, args...)
	return e
}

// WithPos returns e with a position attached.
func (e *Error) WithPos(pos int) *Error {
	e.Pos = pos
	return e
}

// CodeOf returns the SQLSTATE of err, XX000 when it carries none.
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}
