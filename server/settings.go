package server

import (
	"strings"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/pgcat"
	"github.com/turbinesql/turbinesql/pgwire"
	"github.com/turbinesql/turbinesql/sql"
)

// A session is the pgcat.Env its queries read the system catalog from.
var _ pgcat.Env = (*session)(nil)

func (s *session) User() string                       { return s.user }
func (s *session) Database() string                   { return s.database }
func (s *session) SettingNames() []string             { return settingNames }
func (s *session) Setting(name string) (string, bool) { return s.setting(name) }

// Roles are the catalog's users, and the session's own user when it is
// not one of them (trust authentication lets anyone in).
func (s *session) Roles() []pgcat.Role {
	var out []pgcat.Role
	seen := false
	for _, u := range s.srv.cat.Users() {
		out = append(out, pgcat.Role{Name: u.Name, Super: u.Admin})
		seen = seen || u.Name == s.user
	}
	if !seen {
		out = append(out, pgcat.Role{Name: s.user, Super: s.srv.isAdmin(s.user)})
	}
	return out
}

// Relations lists sources then streams, each by name.
func (s *session) Relations() []*catalog.Relation {
	var out []*catalog.Relation
	for _, src := range s.srv.cat.Sources() {
		if r, ok := s.srv.cat.Relation(src.Name); ok {
			out = append(out, r)
		}
	}
	for _, st := range s.srv.cat.Streams() {
		if r, ok := s.srv.cat.Relation(st.Name); ok {
			out = append(out, r)
		}
	}
	return out
}

// settingNames are the settings SHOW, current_setting and pg_settings
// answer here, beyond those of show.go.
var settingNames = []string{
	"application_name", "client_encoding", "DateStyle", "default_table_access_method", "default_transaction_isolation",
	"default_transaction_read_only", "extra_float_digits", "integer_datetimes", "IntervalStyle", "is_superuser",
	"lc_collate", "lc_ctype", "max_identifier_length", "search_path", "server_encoding", "server_version",
	"server_version_num", "session_authorization", "standard_conforming_strings", "statement_timeout", "TimeZone",
	"transaction_isolation", "transaction_read_only",
}

// setting is the value of a run-time setting for this session.
func (s *session) setting(name string) (string, bool) {
	switch strings.ToLower(name) {
	case "application_name":
		return "", true
	case "default_table_access_method":
		return "heap", true
	case "client_encoding", "server_encoding":
		return "UTF8", true
	case "datestyle":
		return "ISO, MDY", true
	case "default_transaction_isolation", "transaction_isolation":
		return "read committed", true
	case "default_transaction_read_only", "transaction_read_only", "is_superuser":
		return "off", true
	case "extra_float_digits":
		return "1", true
	case "integer_datetimes", "standard_conforming_strings":
		return "on", true
	case "intervalstyle":
		return "postgres", true
	case "lc_collate", "lc_ctype":
		return "C", true
	case "max_identifier_length":
		return "63", true
	case "search_path":
		return `"$user", public`, true
	case "server_version":
		return pgwire.ServerVersion, true
	case "server_version_num":
		return pgwire.ServerVersionNum, true
	case "session_authorization":
		return s.user, true
	case "timezone":
		return "UTC", true
	case settingStatementTimeout:
		return sql.FormatMillisSetting(s.StatementTimeout()), true
	}
	return "", false
}
