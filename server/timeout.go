package server

import (
	"time"

	"github.com/turbinesql/turbinesql/pgwire"
	"github.com/turbinesql/turbinesql/sql"
)

// Session settings the engine acts on. Others (application_name,
// DateStyle, ...) are accepted and answered as before: clients set them
// at connect and expect SET to succeed.

const settingStatementTimeout = "statement_timeout"

// StatementTimeout is the session's statement_timeout, for the wire layer
// (pgwire.StatementTimeouter): a SET LOCAL inside a transaction block,
// else the session's SET, else the server's --statement-timeout.
func (s *session) StatementTimeout() time.Duration {
	if s.localTimeout != nil {
		return *s.localTimeout
	}
	if s.timeout != nil {
		return *s.timeout
	}
	return s.srv.cfg.StatementTimeout
}

var _ pgwire.StatementTimeouter = (*session)(nil)

// set runs SET and RESET.
func (s *session) set(st *sql.Set) (*pgwire.Result, error) {
	res := &pgwire.Result{Tag: "SET"}
	if st.Reset {
		res.Tag = "RESET"
	}
	if st.All {
		s.timeout, s.localTimeout = nil, nil
		return res, nil
	}
	if st.Name != settingStatementTimeout {
		return res, nil
	}
	var d *time.Duration
	if !st.Default {
		v, err := sql.ParseMillisSetting(st.Name, st.Value)
		if err != nil {
			return nil, err.(*sql.Error).WithPos(st.Pos)
		}
		d = &v
	}
	switch {
	case st.Local && !s.inTx:
		// PostgreSQL's answer: a WARNING, and no effect.
		res.Notices = []pgwire.Notice{{Severity: "WARNING", Code: "25P01", Message: "SET LOCAL can only be used in transaction blocks"}}
	case st.Local:
		if d == nil {
			def := s.sessionTimeout()
			d = &def
		}
		s.localTimeout = d
	default:
		s.timeout = d
		if s.inTx && s.localTimeout != nil {
			// A later SET overrides an earlier SET LOCAL, as in PostgreSQL.
			s.localTimeout = nil
		}
	}
	return res, nil
}

// sessionTimeout is the statement_timeout outside SET LOCAL.
func (s *session) sessionTimeout() time.Duration {
	if s.timeout != nil {
		return *s.timeout
	}
	return s.srv.cfg.StatementTimeout
}

// trackTx follows BEGIN/COMMIT/ROLLBACK for SET LOCAL's lifetime.
func (s *session) trackTx(tag string) {
	switch tag {
	case "BEGIN":
		s.inTx = true
	case "COMMIT", "ROLLBACK":
		s.inTx = false
		s.localTimeout = nil
	}
}
