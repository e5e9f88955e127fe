package pki

import "errors"

// Sentinel errors; every error the package returns wraps one of them.
var (
	// ErrBadName is returned for a role or name that cannot be put in a
	// certificate.
	ErrBadName = errors.New("pki: bad role or name")
	// ErrBadFile is returned for a PEM file that does not hold what it
	// should (a certificate, an ECDSA key, a CA), or that cannot be read
	// or written.
	ErrBadFile = errors.New("pki: bad certificate or key file")
	// ErrRefused is returned when a peer's certificate is refused: not
	// signed by the cluster CA, expired, without an identity, or of a
	// role that may not use the channel.
	ErrRefused = errors.New("pki: certificate refused")
	// ErrChannel is returned when a configuration is asked for a channel
	// this holder's role does not serve or dial.
	ErrChannel = errors.New("pki: channel not allowed for this role")
	// ErrOverload is why a listener closes a connection before its
	// handshake: its source, or everyone who is not a member, has as
	// many handshakes (or connections) in progress as the listener
	// allows.
	ErrOverload = errors.New("pki: overloaded")
	// ErrUnprotected is returned for a private file (a key, a token)
	// that users other than its owner may read or write.
	ErrUnprotected = errors.New("pki: unprotected private file")
)
