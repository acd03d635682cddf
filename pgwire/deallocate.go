package pgwire

import (
	"regexp"
	"strings"
)

// deallocateRe matches DEALLOCATE [PREPARE] {name | ALL}. Prepared
// statements live in the wire layer, so it answers DEALLOCATE itself; the
// Backend never sees protocol-level statements. Drivers and poolers send it
// as a simple query (pgx's DeallocateAll, pgbouncer's reset query).
var deallocateRe = regexp.MustCompile(`(?is)^\s*deallocate\s+(?:prepare\s+)?("(?:[^"]|"")+"|[a-z_][a-z0-9_$]*)\s*;?\s*$`)

// deallocate runs stmt if it is a DEALLOCATE and reports whether it was.
func (c *conn) deallocate(stmt string) (tag string, handled bool, err error) {
	m := deallocateRe.FindStringSubmatch(stmt)
	if m == nil {
		return "", false, nil
	}
	name := m[1]
	if strings.HasPrefix(name, `"`) {
		name = strings.ReplaceAll(name[1:len(name)-1], `""`, `"`)
	} else {
		if strings.EqualFold(name, "all") {
			clear(c.stmts)
			clear(c.portals)
			return "DEALLOCATE ALL", true, nil
		}
		name = strings.ToLower(name) // unquoted identifiers fold to lower case
	}
	st, ok := c.stmts[name]
	if !ok {
		return "", true, newWireError(codeInvalidSQLStatementName, "prepared statement %q does not exist", name)
	}
	c.dropStatement(name, st)
	return "DEALLOCATE", true, nil
}
