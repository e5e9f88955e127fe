// Package jsonin decodes one JSON value from outside input strictly: no
// unknown fields and nothing after the value, so that a typo in a field
// name or a second message glued to the first is refused, not ignored.
package jsonin
