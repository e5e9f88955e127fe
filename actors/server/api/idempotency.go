package api

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"net/http"
)

// HeaderIdempotencyKey names a write request's idempotency key: a random
// string a client makes once per logical request and sends again on each
// retry, so that a retry of a write that had already committed answers
// as the write did (docs/replicated-state.md, "Idempotent writes").
const HeaderIdempotencyKey = "Idempotency-Key"

// maxKey bounds the length of an idempotency key.
const maxKey = 128

// idempotencyKey returns the request's idempotency key ("": none), or
// why it is not one.
func idempotencyKey(r *http.Request) (string, error) {
	k := r.Header.Get(HeaderIdempotencyKey)
	if len(k) > maxKey {
		return "", fmt.Errorf("api: %s of %d bytes (at most %d)", HeaderIdempotencyKey, len(k), maxKey)
	}
	for _, c := range k {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return "", fmt.Errorf("api: %s %q: want letters, digits, '-' and '_'", HeaderIdempotencyKey, k)
		}
	}
	return k, nil
}

// digestReader hashes what is read through it.
type digestReader struct {
	r io.Reader
	h hash.Hash
}

func newDigestReader(r io.Reader) *digestReader {
	return &digestReader{r: r, h: sha256.New()}
}

func (d *digestReader) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	d.h.Write(p[:n])
	return n, err
}

// submitKey is the key a submission records: the client's key and a
// digest of the body read so far, so that another spec sent under a
// reused key is not taken for a retry ("" without a client key).
func (d *digestReader) submitKey(key string) string {
	if key == "" {
		return ""
	}
	_, _ = io.Copy(d.h, d.r) // the rest of the body, if the decoder stopped early
	return key + "." + hex.EncodeToString(d.h.Sum(nil)[:16])
}
