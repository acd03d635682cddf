package catalog

import (
	"fmt"
	"sort"
	"strings"
)

// User is a login. Only the SCRAM-SHA-256 verifier of its password is
// kept, never the password: the catalog topic holds Statement(), whose
// PASSWORD is the verifier (PostgreSQL stores a verifier given as a
// password as it is, so replaying the statement restores the same login).
type User struct {
	Name     string
	Verifier string
	// Admin users run DDL, INSERT and manage users; the others only read
	// (SELECT, SHOW, DESCRIBE, EXPLAIN).
	Admin bool
}

// Statement is the CREATE USER that recreates u, as kept in the log.
func (u *User) Statement() string {
	s := fmt.Sprintf("CREATE USER %s WITH PASSWORD '%s'", quoteIdent(u.Name), strings.ReplaceAll(u.Verifier, "'", "''"))
	if u.Admin {
		s += " ADMIN"
	}
	return s
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// ErrUserExists and ErrUserNotFound are the user counterparts of
// ErrExists and ErrNotFound.
type ErrUserExists struct{ Name string }

func (e *ErrUserExists) Error() string { return fmt.Sprintf("user %q already exists", e.Name) }

type ErrUserNotFound struct{ Name string }

func (e *ErrUserNotFound) Error() string { return fmt.Sprintf("user %q does not exist", e.Name) }

// PutUser adds u, or replaces the user of that name when replace is set
// (ALTER USER, replay). persist appends it to the log.
func (c *Catalog) PutUser(u *User, replace, persist bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.users[u.Name]; ok && !replace {
		return &ErrUserExists{Name: u.Name}
	}
	if persist && c.log != nil {
		if err := c.log.Write(Change{Kind: KindUser, Name: u.Name, SQL: u.Statement(), Op: OpPut}); err != nil {
			return fmt.Errorf("persist user %s: %w", u.Name, err)
		}
	}
	cp := *u
	c.users[u.Name] = &cp
	return nil
}

// DropUser removes a user.
func (c *Catalog) DropUser(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.users[name]; !ok {
		return &ErrUserNotFound{Name: name}
	}
	if c.log != nil {
		if err := c.log.Write(Change{Kind: KindUser, Name: name, Op: OpDrop}); err != nil {
			return fmt.Errorf("persist drop of user %s: %w", name, err)
		}
	}
	delete(c.users, name)
	return nil
}

// User looks up a user; the copy returned is the caller's.
func (c *Catalog) User(name string) (User, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	u, ok := c.users[name]
	if !ok {
		return User{}, false
	}
	return *u, true
}

// Users lists the users by name.
func (c *Catalog) Users() []User {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]User, 0, len(c.users))
	for _, u := range c.users {
		out = append(out, *u)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
