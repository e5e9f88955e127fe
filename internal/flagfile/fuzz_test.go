package flagfile_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pollux/internal/flagfile"
)

// FuzzApply feeds the decoder any bytes: it never panics, an error
// names the file, and an accepted file reads back the same through
// Print.
func FuzzApply(f *testing.F) {
	for _, name := range []string{"server.yaml", "bad.yaml"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("a: &x 1\nid: *x\n"))
	f.Add([]byte("join: [&y a, *y]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fs, _ := newFlags()
		err := flagfile.Apply(fs, "fuzz.yaml", data)
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz.yaml") {
				t.Fatalf("error without the file's name: %v", err)
			}
			return
		}
		var out strings.Builder
		if err := flagfile.Print(&out, fs); err != nil {
			t.Fatal(err)
		}
		fs2, _ := newFlags()
		if err := flagfile.Apply(fs2, "printed", []byte(out.String())); err != nil {
			t.Fatalf("printed settings do not read back: %v\n%s", err, out.String())
		}
		var again strings.Builder
		if err := flagfile.Print(&again, fs2); err != nil {
			t.Fatal(err)
		}
		if again.String() != out.String() {
			t.Fatalf("read back differently:\n%s\nwas\n%s", again.String(), out.String())
		}
	})
}
