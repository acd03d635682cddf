package pgwire

import (
	"crypto/hmac"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/xdg-go/scram"
)

// SCRAM-SHA-256 verifiers are kept in PostgreSQL's own text form,
//
//	SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>
//
// (base64 fields), so a verifier taken from pg_authid works here and one
// made here works there. It lets a server check a password without
// holding it: the password cannot be recovered from it.
const (
	scramMechanism = "SCRAM-SHA-256"
	scramPrefix    = scramMechanism + "$"
	// scramIterations is PostgreSQL's default (scram_iterations).
	scramIterations = 4096
	scramSaltLen    = 16
)

// NewSCRAMVerifier makes a fresh verifier (random salt) for password.
func NewSCRAMVerifier(password string) (string, error) {
	if password == "" {
		return "", errors.New("empty password")
	}
	salt := make([]byte, scramSaltLen)
	_, _ = rand.Read(salt) // crypto/rand.Read never fails
	// SASLprep the password as PostgreSQL does; one it cannot prepare
	// (e.g. unassigned code points) is used as raw bytes, also as it does.
	cl, err := scram.SHA256.NewClient("", password, "")
	if err != nil {
		if cl, err = scram.SHA256.NewClientUnprepped("", password, ""); err != nil {
			return "", fmt.Errorf("scram: %w", err)
		}
	}
	cred := cl.GetStoredCredentials(scram.KeyFactors{Salt: string(salt), Iters: scramIterations})
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("%s%d:%s$%s:%s", scramPrefix, scramIterations, b64(salt), b64(cred.StoredKey), b64(cred.ServerKey)), nil
}

// IsSCRAMVerifier reports whether s has a verifier's shape (PostgreSQL
// stores such a "password" as it is, and so do we).
func IsSCRAMVerifier(s string) bool {
	_, err := parseSCRAMVerifier(s)
	return err == nil
}

func parseSCRAMVerifier(s string) (scram.StoredCredentials, error) {
	var cred scram.StoredCredentials
	rest, ok := strings.CutPrefix(s, scramPrefix)
	if !ok {
		return cred, errors.New("not a SCRAM-SHA-256 verifier")
	}
	factors, keys, ok := strings.Cut(rest, "$")
	if !ok {
		return cred, errors.New("SCRAM verifier: missing keys")
	}
	iters, salt, ok1 := strings.Cut(factors, ":")
	stored, server, ok2 := strings.Cut(keys, ":")
	if !ok1 || !ok2 {
		return cred, errors.New("SCRAM verifier: malformed")
	}
	n, err := strconv.Atoi(iters)
	if err != nil || n <= 0 {
		return cred, fmt.Errorf("SCRAM verifier: bad iteration count %q", iters)
	}
	dec := base64.StdEncoding.DecodeString
	saltB, err1 := dec(salt)
	storedB, err2 := dec(stored)
	serverB, err3 := dec(server)
	if err := errors.Join(err1, err2, err3); err != nil {
		return cred, fmt.Errorf("SCRAM verifier: %w", err)
	}
	if len(storedB) != 32 || len(serverB) != 32 {
		return cred, errors.New("SCRAM verifier: keys are not SHA-256 sized")
	}
	cred.KeyFactors = scram.KeyFactors{Salt: string(saltB), Iters: n}
	cred.StoredKey, cred.ServerKey = storedB, serverB
	return cred, nil
}

// mockCredentials stand in for a user that does not exist (or has no
// valid verifier): the exchange runs to its end and fails at the proof,
// exactly as a wrong password does, so a client learns nothing about
// which user names exist.
func mockCredentials() scram.StoredCredentials {
	b := make([]byte, scramSaltLen+64)
	_, _ = rand.Read(b)
	return scram.StoredCredentials{
		KeyFactors: scram.KeyFactors{Salt: string(b[:scramSaltLen]), Iters: scramIterations},
		StoredKey:  b[scramSaltLen : scramSaltLen+32],
		ServerKey:  b[scramSaltLen+32:],
	}
}

// VerifySCRAM reports whether password matches verifier, by deriving the
// keys again with the verifier's salt and iterations.
func VerifySCRAM(verifier, password string) bool {
	cred, err := parseSCRAMVerifier(verifier)
	if err != nil {
		return false
	}
	cl, err := scram.SHA256.NewClient("", password, "")
	if err != nil {
		if cl, err = scram.SHA256.NewClientUnprepped("", password, ""); err != nil {
			return false
		}
	}
	got := cl.GetStoredCredentials(cred.KeyFactors)
	return hmac.Equal(got.StoredKey, cred.StoredKey) && hmac.Equal(got.ServerKey, cred.ServerKey)
}
