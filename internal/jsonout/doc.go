// Package jsonout writes the one JSON object a `--json` command prints:
// indented by two spaces, with a final newline.
package jsonout
