package server

import (
	"errors"
	"fmt"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/pgwire"
	"github.com/turbinesql/turbinesql/sql"
)

// InitialUser is the admin user whose password comes from TURBINE_PASSWORD
// or --password-file.
const InitialUser = "turbine"

// Authentication methods of the SQL port.
const (
	AuthTrust = "trust" // any user name logs in, no password (the loopback demo)
	AuthSCRAM = "scram" // SCRAM-SHA-256 against the users of the catalog
)

// verifier answers pgwire's SCRAM lookups from the catalog, so CREATE,
// ALTER and DROP USER take effect on the next login.
func (s *Server) verifier(user string) (string, bool) {
	u, ok := s.cat.User(user)
	if !ok || u.Verifier == "" {
		return "", false
	}
	return u.Verifier, true
}

// isAdmin says whether user may change things. Under trust a name the
// catalog does not know is the demo's all-powerful user, as before there
// were users; a known user has its own role under either method.
func (s *Server) isAdmin(user string) bool {
	if u, ok := s.cat.User(user); ok {
		return u.Admin
	}
	return s.cfg.Auth != AuthSCRAM
}

// authorize refuses what a non-admin may not run: they read (SELECT,
// SHOW, DESCRIBE, EXPLAIN, FLUSH to wait for results) and may change their
// own password, as in PostgreSQL; DDL, INSERT, COPY FROM and user management are the
// admins'.
func (s *Server) authorize(user string, stmt sql.Statement) error {
	switch st := stmt.(type) {
	case *sql.Select, *sql.Show, *sql.ShowCreate, *sql.ShowPartitions, *sql.ShowTasks, *sql.Describe, *sql.Explain, *sql.Noop, *sql.Flush,
		*sql.Subscribe, *sql.CopyOut, *sql.DeclareCursor, *sql.Fetch, *sql.CloseCursor:
		return nil
	case *sql.AlterUser:
		if st.Name == user && st.Admin == nil {
			return nil
		}
	}
	if s.isAdmin(user) {
		return nil
	}
	return insufficientPrivilege("permission denied: %s needs an admin user, and %q is not one", statementName(stmt), user).
		WithHint("connect as an admin, or have one run ALTER USER %s ADMIN", user)
}

func statementName(stmt sql.Statement) string {
	switch st := stmt.(type) {
	case *sql.CreateSource:
		return "CREATE SOURCE"
	case *sql.CreateStream:
		return "CREATE STREAM"
	case *sql.Insert:
		return "INSERT"
	case *sql.CopyIn:
		return "COPY"
	case *sql.Drop:
		return "DROP"
	case *sql.AlterStream:
		return "ALTER STREAM " + string(st.Action)
	case *sql.AlterSource:
		return "ALTER SOURCE"
	case *sql.CreateUser:
		return "CREATE USER"
	case *sql.AlterUser:
		return "ALTER USER"
	case *sql.DropUser:
		return "DROP USER"
	}
	return fmt.Sprintf("%T", stmt)
}

// verifierFor turns the PASSWORD of CREATE/ALTER USER into what is kept:
// a verifier given as the password is kept as it is (PostgreSQL does the
// same, and replaying the catalog relies on it); anything else is hashed.
func verifierFor(password string) (string, error) {
	if pgwire.IsSCRAMVerifier(password) {
		return password, nil
	}
	v, err := pgwire.NewSCRAMVerifier(password)
	if err != nil {
		return "", sql.Errorf(sql.CodeInvalidParameter, "password: %w", err)
	}
	return v, nil
}

func (s *Server) createUser(st *sql.CreateUser, persist bool) (*pgwire.Result, error) {
	u := &catalog.User{Name: st.Name, Admin: st.Admin}
	if st.HasPass {
		v, err := verifierFor(st.Password)
		if err != nil {
			return nil, err
		}
		u.Verifier = v
	}
	// Replay re-applies a user's latest statement: replace what is there.
	if err := s.cat.PutUser(u, !persist, persist); err != nil {
		return nil, err
	}
	return &pgwire.Result{Tag: "CREATE ROLE"}, nil
}

func (s *Server) alterUser(st *sql.AlterUser) (*pgwire.Result, error) {
	u, ok := s.cat.User(st.Name)
	if !ok {
		return nil, &catalog.ErrUserNotFound{Name: st.Name}
	}
	if st.HasPass {
		v, err := verifierFor(st.Password)
		if err != nil {
			return nil, err
		}
		u.Verifier = v
	}
	if st.Admin != nil {
		u.Admin = *st.Admin
	}
	if err := s.cat.PutUser(&u, true, true); err != nil {
		return nil, err
	}
	return &pgwire.Result{Tag: "ALTER ROLE"}, nil
}

func (s *Server) dropUser(st *sql.DropUser, current string) (*pgwire.Result, error) {
	if st.Name == current {
		return nil, sql.Errorf(sql.CodeObjectInUse, "current user cannot be dropped").WithHint("connect as another admin to drop %s", current)
	}
	err := s.cat.DropUser(st.Name)
	var nf *catalog.ErrUserNotFound
	if errors.As(err, &nf) && st.IfExists {
		return &pgwire.Result{Tag: "DROP ROLE"}, nil
	}
	if err != nil {
		return nil, err
	}
	return &pgwire.Result{Tag: "DROP ROLE"}, nil
}

// bootstrapUser gives the initial user the start-up password: created as
// an admin if missing, its verifier replaced if the password changed, so
// the operator's secret is always the one that works for turbine.
func (s *Server) bootstrapUser() error {
	pass := s.cfg.InitialPassword
	if pass == "" {
		if s.cfg.Auth == AuthSCRAM && len(s.cat.Users()) == 0 {
			return fmt.Errorf("--auth scram and no user can log in: give the user %s a password with TURBINE_PASSWORD or --password-file", InitialUser)
		}
		return nil
	}
	u, ok := s.cat.User(InitialUser)
	if ok && pgwire.VerifySCRAM(u.Verifier, pass) && u.Admin {
		return nil
	}
	v, err := pgwire.NewSCRAMVerifier(pass)
	if err != nil {
		return fmt.Errorf("password of %s: %w", InitialUser, err)
	}
	if err := s.cat.PutUser(&catalog.User{Name: InitialUser, Verifier: v, Admin: true}, true, true); err != nil {
		return err
	}
	s.log.Info("user set from the start-up password", "user", InitialUser, "created", !ok)
	return nil
}

// showUsers is SHOW USERS: names and roles, never verifiers.
func (s *Server) showUsers() *pgwire.Result {
	res := &pgwire.Result{Columns: textColumns("name", "role"), Tag: "SHOW"}
	for _, u := range s.cat.Users() {
		role := "reader"
		if u.Admin {
			role = "admin"
		}
		res.Rows = append(res.Rows, []any{u.Name, role})
	}
	return res
}
