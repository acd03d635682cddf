package pgwire

import (
	"crypto/tls"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/xdg-go/scram"
)

// SQLSTATE of a failed login (invalid_password).
const codeInvalidPassword = "28P01"

// VerifierLookup returns the SCRAM-SHA-256 verifier of user (as made by
// NewSCRAMVerifier), false when the user cannot log in.
type VerifierLookup func(user string) (verifier string, ok bool)

// WithSCRAM requires every connection to authenticate with SCRAM-SHA-256
// against the verifiers lookup returns, as PostgreSQL does with
// password_encryption = scram-sha-256. Without it any user is let in.
func WithSCRAM(lookup VerifierLookup) Option {
	return func(s *Server) { s.scramLookup = lookup }
}

// WithTLS answers SSLRequest with TLS using cfg (nil: refuse it), and with
// required set refuses clients that start in plain text.
func WithTLS(cfg *tls.Config, required bool) Option {
	return func(s *Server) { s.tlsConfig, s.tlsRequired = cfg, required }
}

// errLoginFailed is what every failed login says: PostgreSQL's message,
// whatever went wrong (unknown user, wrong password, malformed exchange),
// so the answer tells an attacker nothing.
func errLoginFailed(user string) error {
	return newWireError(codeInvalidPassword, "password authentication failed for user %q", user)
}

// authenticate runs a SCRAM-SHA-256 exchange for user. On failure it has
// already sent the FATAL error.
func (c *conn) authenticate(user string) error {
	cred := mockCredentials()
	if v, ok := c.srv.scramLookup(user); ok {
		if parsed, err := parseSCRAMVerifier(v); err == nil {
			cred = parsed
		} else {
			c.srv.log.Warn("pgwire: stored verifier is unusable", "user", user, "err", err)
		}
	}
	// The SCRAM user name is ignored: PostgreSQL clients send an empty one
	// and the startup packet's user is the one that logs in.
	srv, err := scram.SHA256.NewServer(func(string) (scram.StoredCredentials, error) { return cred, nil })
	if err != nil {
		return fmt.Errorf("scram server: %w", err)
	}
	conv := srv.NewConversation()
	fail := func(cause error) error {
		c.fatal(errLoginFailed(user))
		return fmt.Errorf("authentication of %q: %w", user, cause)
	}

	c.be.Send(&pgproto3.AuthenticationSASL{AuthMechanisms: []string{scramMechanism}})
	if err := c.flush(); err != nil {
		return err
	}
	if err := c.be.SetAuthType(pgproto3.AuthTypeSASL); err != nil {
		return err
	}
	msg, err := c.be.Receive()
	if err != nil {
		return fmt.Errorf("receive SASLInitialResponse: %w", err)
	}
	first, ok := msg.(*pgproto3.SASLInitialResponse)
	if !ok {
		// psql sends nothing when it has no password: it just hangs up, and
		// we only get here with a client that answered something else.
		return fail(fmt.Errorf("expected SASLInitialResponse, got %T", msg))
	}
	if first.AuthMechanism != scramMechanism {
		c.fatal(newWireError(codeProtocolViolation, "SASL mechanism %q is not supported: use %s", first.AuthMechanism, scramMechanism))
		return fmt.Errorf("client chose SASL mechanism %q", first.AuthMechanism)
	}
	s1, err := conv.Step(string(first.Data))
	if err != nil {
		return fail(err)
	}
	c.be.Send(&pgproto3.AuthenticationSASLContinue{Data: []byte(s1)})
	if err := c.flush(); err != nil {
		return err
	}
	if err := c.be.SetAuthType(pgproto3.AuthTypeSASLContinue); err != nil {
		return err
	}
	if msg, err = c.be.Receive(); err != nil {
		return fmt.Errorf("receive SASLResponse: %w", err)
	}
	final, ok := msg.(*pgproto3.SASLResponse)
	if !ok {
		return fail(fmt.Errorf("expected SASLResponse, got %T", msg))
	}
	s2, err := conv.Step(string(final.Data))
	if err != nil || !conv.Valid() {
		if err == nil {
			err = errors.New("proof not valid")
		}
		return fail(err)
	}
	c.be.Send(&pgproto3.AuthenticationSASLFinal{Data: []byte(s2)})
	return nil
}

// startTLS upgrades the connection after an SSLRequest was answered 'S'.
func (c *conn) startTLS() error {
	tc := tls.Server(c.nc, c.srv.tlsConfig)
	if err := tc.HandshakeContext(c.ctx); err != nil {
		return fmt.Errorf("TLS handshake: %w", err)
	}
	c.setTransport(tc)
	c.tls = true
	return nil
}
