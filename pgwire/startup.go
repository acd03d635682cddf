package pgwire

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// ServerVersion is reported as server_version. It must start with a
// PostgreSQL version number: drivers parse it to pick features (libpq, and
// so psql and psycopg, reads the leading numbers; PgJDBC too, ignoring the
// rest, as it must for Debian's "16.4 (Debian 16.4-1)"). Queries are
// written against PostgreSQL 16's catalog and behaviour.
const ServerVersion = "16.0 (TurbineSQL)"

// ServerVersionNum is server_version_num for ServerVersion.
const ServerVersionNum = "160000"

// maxEncryptionRequests bounds SSLRequest/GSSEncRequest rounds before the
// StartupMessage (a client may try GSS and then SSL), so a client cannot
// loop forever.
const maxEncryptionRequests = 2

// startup runs the handshake: SSLRequest upgrades to TLS when the server
// has a certificate (GSS encryption is always refused), and the user logs
// in with SCRAM-SHA-256 when the server requires it, else without a password. It returns false without error when the
// connection should just be closed (a CancelRequest).
func (c *conn) startup() (bool, error) {
	if err := c.nc.SetDeadline(time.Now().Add(c.srv.startupTimeout)); err != nil {
		return false, fmt.Errorf("set startup deadline: %w", err)
	}
	for requests := 0; ; requests++ {
		msg, err := c.be.ReceiveStartupMessage()
		if err != nil {
			return false, fmt.Errorf("receive startup message: %w", err)
		}
		switch m := msg.(type) {
		case *pgproto3.SSLRequest, *pgproto3.GSSEncRequest:
			if requests >= maxEncryptionRequests {
				return false, fmt.Errorf("too many encryption requests")
			}
			if _, ssl := m.(*pgproto3.SSLRequest); ssl && c.srv.tlsConfig != nil && !c.tls {
				if _, err := c.nc.Write([]byte{'S'}); err != nil {
					return false, fmt.Errorf("accept TLS: %w", err)
				}
				if err := c.startTLS(); err != nil {
					return false, err
				}
				continue
			}
			// 'N' is a single unframed byte: no encryption, carry on in
			// plain text with a new startup packet.
			if _, err := c.nc.Write([]byte{'N'}); err != nil {
				return false, fmt.Errorf("refuse encryption: %w", err)
			}
		case *pgproto3.CancelRequest:
			// The request travels on a connection of its own, which
			// PostgreSQL closes without a reply whether or not it matched.
			c.srv.cancelRequest(m.ProcessID, m.SecretKey)
			return false, nil
		case *pgproto3.StartupMessage:
			if c.srv.tlsRequired && !c.tls {
				c.fatal(newWireError(codeInvalidAuthorizationSpec, "this server accepts only TLS connections: connect with sslmode=require (or verify-full)"))
				return false, fmt.Errorf("plain-text connection refused: TLS is required")
			}
			if err := c.accept(m); err != nil {
				return false, err
			}
			if err := c.nc.SetDeadline(time.Time{}); err != nil {
				return false, fmt.Errorf("clear startup deadline: %w", err)
			}
			// From here on every message is typed and framed: the reader
			// can tell an idle client from one stalled mid-message.
			c.rd.framed = true
			return true, nil
		default:
			return false, fmt.Errorf("unexpected startup message %T", msg)
		}
	}
}

// accept answers a StartupMessage: protocol negotiation, AuthenticationOk,
// the session parameters, BackendKeyData and the first ReadyForQuery.
func (c *conn) accept(m *pgproto3.StartupMessage) error {
	user := m.Parameters["user"]
	if user == "" {
		c.fatal(newWireError(codeInvalidAuthorizationSpec, "no PostgreSQL user name specified in startup packet"))
		return fmt.Errorf("startup without user name")
	}
	database := m.Parameters["database"]
	if database == "" {
		database = user // PostgreSQL's default
	}

	// Only protocol 3.0 is spoken. A client asking for a newer minor
	// version or for protocol extensions (_pq_.*) is told so and carries on
	// with 3.0, which is how PostgreSQL itself downgrades.
	var unknownOptions []string
	for k := range m.Parameters {
		if strings.HasPrefix(k, "_pq_.") {
			unknownOptions = append(unknownOptions, k)
		}
	}
	slices.Sort(unknownOptions)
	if m.ProtocolVersion != pgproto3.ProtocolVersion30 || len(unknownOptions) > 0 {
		c.be.Send(&pgproto3.NegotiateProtocolVersion{NewestMinorProtocol: 0, UnrecognizedOptions: unknownOptions})
	}

	if c.srv.scramLookup != nil {
		if err := c.authenticate(user); err != nil {
			return err
		}
	}
	c.be.Send(&pgproto3.AuthenticationOk{})
	for _, p := range [][2]string{
		{"server_version", ServerVersion},
		{"server_encoding", "UTF8"},
		{"client_encoding", "UTF8"},
		{"DateStyle", "ISO, MDY"},
		{"integer_datetimes", "on"},
		{"standard_conforming_strings", "on"},
		{"TimeZone", "UTC"},
		{"application_name", m.Parameters["application_name"]},
		{"is_superuser", "off"},
		{"session_authorization", user},
		{"IntervalStyle", "postgres"},
	} {
		c.be.Send(&pgproto3.ParameterStatus{Name: p[0], Value: cstring(p[1])})
	}

	// The key a CancelRequest must quote to cancel this connection's
	// statements (psql sends it on Ctrl-C).
	c.key = c.srv.register(c)
	c.be.Send(&pgproto3.BackendKeyData{ProcessID: c.key.pid, SecretKey: c.key.secret[:]})

	c.sess = c.srv.backend.NewSession(user, database)
	return c.readyForQuery()
}
