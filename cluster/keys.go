package cluster

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"strings"

	"github.com/hashicorp/memberlist"
)

// KeySize is the size of keys NewKey makes: AES-256.
const KeySize = 32

// Label is the label every member puts on its gossip packets (memberlist
// authenticates it with the key): packets of another system sharing the
// port range are refused.
const Label = "pollux"

// NewKey returns a new random gossip key, base64-encoded, as `pollux
// keygen` prints it.
func NewKey() (string, error) {
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		return "", fmt.Errorf("cluster: gossip key: %w", err)
	}
	return base64.StdEncoding.EncodeToString(k), nil
}

// ParseKeys reads a gossip key file: one base64 key (16, 24 or 32 bytes:
// AES-128, -192 or -256) per line; blank lines and lines starting with #
// are ignored. The first key is the primary one (gossip is sent with
// it); every key is accepted on receipt. Keys may not repeat.
func ParseKeys(b []byte) ([][]byte, error) {
	var keys [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(line)
		if err != nil {
			return nil, fmt.Errorf("%w: gossip key line %d is not base64: %w", ErrConfig, n, err)
		}
		if err := memberlist.ValidateKey(k); err != nil {
			return nil, fmt.Errorf("%w: gossip key line %d: %w", ErrConfig, n, err)
		}
		for _, o := range keys {
			if bytes.Equal(o, k) {
				return nil, fmt.Errorf("%w: gossip key line %d repeats a key", ErrConfig, n)
			}
		}
		keys = append(keys, k)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: gossip key file: %w", ErrConfig, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no gossip key in the file (make one with pollux keygen)", ErrConfig)
	}
	return keys, nil
}

// ReadKeyFile reads and parses a gossip key file (see ParseKeys).
func ReadKeyFile(path string) ([][]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: gossip key file: %w", ErrConfig, err)
	}
	if st.Size() > 64<<10 {
		return nil, fmt.Errorf("%w: gossip key file %s is %d bytes", ErrConfig, path, st.Size())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: gossip key file: %w", ErrConfig, err)
	}
	keys, err := ParseKeys(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return keys, nil
}

// KeyID names a key in logs without revealing it: the first 8 hex digits
// of its SHA-256.
func KeyID(k []byte) string {
	sum := sha256.Sum256(k)
	return hex.EncodeToString(sum[:4])
}
