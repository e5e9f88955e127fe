package jsonin

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// ErrTrailing is returned when data follows the JSON value.
var ErrTrailing = errors.New("trailing data after the JSON value")

// Decode decodes b, which must hold exactly one JSON value, into v,
// refusing fields v does not have.
func Decode(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return ErrTrailing
	}
	return nil
}
