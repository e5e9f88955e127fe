package jsonout

import (
	"encoding/json"
	"io"
)

// Write writes v to w as indented JSON.
func Write(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
