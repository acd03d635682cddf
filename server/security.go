package server

import (
	"crypto/tls"
	"fmt"
	"net"

	"github.com/turbinesql/turbinesql/pgwire"
)

// pgwireSecurity validates the SQL port's settings and returns the pgwire
// options that apply them.
func (s *Server) pgwireSecurity() ([]pgwire.Option, error) {
	var opts []pgwire.Option
	switch s.cfg.Auth {
	case AuthTrust:
	case AuthSCRAM:
		opts = append(opts, pgwire.WithSCRAM(s.verifier))
	default:
		return nil, fmt.Errorf("auth %q is not valid: use %s or %s", s.cfg.Auth, AuthTrust, AuthSCRAM)
	}
	if (s.cfg.TLSCert == "") != (s.cfg.TLSKey == "") {
		return nil, fmt.Errorf("tls-cert and tls-key go together: set both to serve TLS, or neither")
	}
	if s.cfg.TLSCert == "" {
		if s.cfg.TLSRequired {
			return nil, fmt.Errorf("tls-required needs a certificate: set tls-cert and tls-key")
		}
		return opts, nil
	}
	cert, err := tls.LoadX509KeyPair(s.cfg.TLSCert, s.cfg.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("tls-cert/tls-key: %w", err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	return append(opts, pgwire.WithTLS(tc, s.cfg.TLSRequired)), nil
}

// warnIfExposed logs loudly when anyone on the network can log in as
// anyone: trust authentication on a non-loopback address.
func (s *Server) warnIfExposed(ln net.Listener) {
	if s.cfg.Auth != AuthTrust {
		return
	}
	addr, ok := ln.Addr().(*net.TCPAddr)
	if !ok || addr.IP.IsLoopback() {
		return
	}
	s.log.Warn("!!! INSECURE: pgwire listens on a non-loopback address with --auth trust: anyone who can reach " +
		addr.String() + " can log in as any user, without a password, and run DDL. " +
		"Start with --auth scram and TURBINE_PASSWORD (and --tls-cert/--tls-key), or listen on 127.0.0.1.")
}
