package flagfile_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"pollux/internal/flagfile"
	"pollux/internal/usage"
)

// settings are the flags of a test command, like those of pollux server.
type settings struct {
	ID, DataDir string
	Interval    time.Duration
	MaxFailures int
	FastGossip  bool
	Ratio       float64
	Join        []string
	Allow       []string
	opts        flagfile.Options
}

func newFlags() (*pflag.FlagSet, *settings) {
	var s settings
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.StringVar(&s.ID, "id", "", "server id")
	fs.StringVar(&s.DataDir, "data-dir", "", "data directory")
	fs.DurationVar(&s.Interval, "interval", time.Minute, "interval")
	fs.IntVar(&s.MaxFailures, "max-failures", 5, "failures")
	fs.BoolVar(&s.FastGossip, "fast-gossip", false, "fast gossip")
	fs.Float64Var(&s.Ratio, "cross-rack-ratio", 2, "ratio")
	fs.StringSliceVar(&s.Join, "join", nil, "join")
	fs.StringArrayVar(&s.Allow, "allow-command", []string{"python3 **"}, "allowed")
	s.opts.Register(fs)
	return fs, &s
}

func TestApply(t *testing.T) {
	file := filepath.Join("testdata", "server.yaml")
	tests := []struct {
		name string
		args []string
		want settings
	}{
		{"the file alone", nil, settings{ID: "s1", DataDir: "/var/lib/pollux", Interval: 30 * time.Second, MaxFailures: 3,
			FastGossip: true, Ratio: 1.5, Join: []string{"10.0.0.2:7946", "10.0.0.3:7946"}, Allow: []string{"python3 train.py **", "emulated:*"}}},
		{"flags win", []string{"--id", "s9", "--interval=5s", "--join", "a:1", "--fast-gossip=false"},
			settings{ID: "s9", DataDir: "/var/lib/pollux", Interval: 5 * time.Second, MaxFailures: 3,
				FastGossip: false, Ratio: 1.5, Join: []string{"a:1"}, Allow: []string{"python3 train.py **", "emulated:*"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs, s := newFlags()
			if err := fs.Parse(append(tt.args, "--config", file)); err != nil {
				t.Fatal(err)
			}
			if printed, err := s.opts.Load(fs, nil); err != nil || printed {
				t.Fatalf("Load: %v (printed %v)", err, printed)
			}
			got := *s
			got.opts = flagfile.Options{}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
			for _, name := range []string{"id", "join", "allow-command", "max-failures"} {
				if !fs.Changed(name) {
					t.Errorf("--%s set by the file is not marked changed", name)
				}
			}
			if fs.Changed("help") {
				t.Error("an unset flag is marked changed")
			}
		})
	}
}

// TestCommaListScalar: a comma-list flag given one value in a file is
// split as on the command line; a repeatable flag of whole values is not.
func TestCommaListScalar(t *testing.T) {
	tests := []struct {
		name, data  string
		join, allow []string
	}{
		{"two addresses", "join: 10.0.0.2:7946,10.0.0.3:7946\n", []string{"10.0.0.2:7946", "10.0.0.3:7946"}, []string{"python3 **"}},
		{"one address", "join: 10.0.0.2:7946\n", []string{"10.0.0.2:7946"}, []string{"python3 **"}},
		{"empty", "join: ''\n", []string{}, []string{"python3 **"}},
		{"a command with a comma", "allow-command: python3 a,b.py\n", nil, []string{"python3 a,b.py"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs, s := newFlags()
			if err := flagfile.Apply(fs, "test.yaml", []byte(tt.data)); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(s.Join, tt.join) || !reflect.DeepEqual(s.Allow, tt.allow) {
				t.Errorf("join %q, allow-command %q; want %q, %q", s.Join, s.Allow, tt.join, tt.allow)
			}
		})
	}
	fs, _ := newFlags()
	if err := flagfile.Apply(fs, "test.yaml", []byte("join: 'a:1,\"b:2'\n")); !errors.Is(err, flagfile.ErrBadValue) || !strings.Contains(err.Error(), "test.yaml:1") {
		t.Errorf("a malformed list: %v", err)
	}
}

// TestBadFiles checks that every mistake is reported with its line, and
// that a refused file changes no flag.
func TestBadFiles(t *testing.T) {
	bad, err := os.ReadFile(filepath.Join("testdata", "bad.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		data string
		want []string
		is   error
	}{
		{"every mistake of a file", string(bad), []string{
			`bad.yaml:2: unknown key "dat-dir" (did you mean "data-dir"?)`,
			`bad.yaml:3: interval: bad value: time: invalid duration "soon"`,
			`bad.yaml:4: max-failures: bad value: a list, but the flag takes one value`,
			`bad.yaml:5: key given twice: "id" (first on line 1)`,
			`bad.yaml:6: fast-gossip: bad value: no value`,
		}, flagfile.ErrUnknownKey},
		{"not a mapping", "- id\n- s1\n", []string{"bad.yaml:1: not a mapping"}, flagfile.ErrNotMapping},
		{"not YAML", "id: [s1\n", []string{"bad.yaml: yaml: line 1"}, nil},
		{"the --config key", "config: other.yaml\n", []string{`bad.yaml:1: unknown key "config"`}, flagfile.ErrUnknownKey},
		{"a nested value", "id:\n  name: s1\n", []string{"bad.yaml:2: id: bad value: want a value"}, flagfile.ErrBadValue},
		{"a bad list item", "join: [a, [b]]\n", []string{"bad.yaml:1: join: bad value: line 1: a list item"}, flagfile.ErrBadValue},
		{"a bad value overridden by a flag", "max-failures: many\n", []string{"bad.yaml:1: max-failures: bad value"}, flagfile.ErrBadValue},
		{"a far-off key", "zzzzzzzz: 1\n", []string{`bad.yaml:1: unknown key "zzzzzzzz" (keys are the command's flag names`}, flagfile.ErrUnknownKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs, s := newFlags()
			if err := fs.Parse([]string{"--max-failures", "7"}); err != nil {
				t.Fatal(err)
			}
			before := *s
			err := flagfile.Apply(fs, "bad.yaml", []byte(tt.data))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), "flagfile: "+w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
			if n := strings.Count(err.Error(), "flagfile: "); n != len(tt.want) {
				t.Errorf("%d errors reported, want %d: %v", n, len(tt.want), err)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v is not %v", err, tt.is)
			}
			if !reflect.DeepEqual(*s, before) {
				t.Errorf("a refused file changed the flags: %+v, was %+v", *s, before)
			}
			for _, name := range []string{"id", "join", "interval"} {
				if fs.Changed(name) {
					t.Errorf("a refused file marked --%s changed", name)
				}
			}
		})
	}
}

func TestLoadErrorsAreBadInput(t *testing.T) {
	fs, s := newFlags()
	if err := fs.Parse([]string{"--config", filepath.Join("testdata", "bad.yaml")}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.opts.Load(fs, nil); !errors.Is(err, usage.ErrBadSetting) {
		t.Errorf("Load of a bad file: %v, want a usage error", err)
	}
	s.opts.File = filepath.Join(t.TempDir(), "missing.yaml")
	if _, err := s.opts.Load(fs, nil); !errors.Is(err, usage.ErrBadSetting) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load of a missing file: %v, want a usage error", err)
	}
}

// TestPrintReadsBack checks that --print-config prints every flag and
// that the printed file, applied to fresh flags, gives the same values.
func TestPrintReadsBack(t *testing.T) {
	fs, s := newFlags()
	if err := fs.Parse([]string{"--config", filepath.Join("testdata", "server.yaml"), "--id", "it's: #1", "--print-config"}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if printed, err := s.opts.Load(fs, &out); err != nil || !printed {
		t.Fatalf("Load: %v (printed %v)", err, printed)
	}
	for _, key := range []string{"id:", "data-dir:", "interval: 30s", "join: [", "allow-command: ["} {
		if !strings.Contains(out.String(), key) {
			t.Errorf("printed config lacks %q:\n%s", key, out.String())
		}
	}
	if strings.Contains(out.String(), "config:") {
		t.Errorf("printed config has the --config key:\n%s", out.String())
	}
	fs2, s2 := newFlags()
	if err := flagfile.Apply(fs2, "printed", out.Bytes()); err != nil {
		t.Fatalf("the printed config does not read back: %v\n%s", err, out.String())
	}
	s.opts, s2.opts = flagfile.Options{}, flagfile.Options{}
	if !reflect.DeepEqual(s, s2) {
		t.Errorf("read back %+v, printed %+v", s2, s)
	}
}

func TestEmptyFileSetsNothing(t *testing.T) {
	for _, data := range []string{"", "# only a comment\n", "---\n"} {
		fs, s := newFlags()
		before := *s
		if err := flagfile.Apply(fs, "empty.yaml", []byte(data)); err != nil {
			t.Errorf("%q: %v", data, err)
		}
		if !reflect.DeepEqual(*s, before) {
			t.Errorf("%q changed the flags", data)
		}
	}
}

func ExamplePrint() {
	fs := pflag.NewFlagSet("agent", pflag.ContinueOnError)
	fs.String("name", "gpu-7", "member name")
	fs.Int("gpus", 0, "emulated GPUs")
	fs.StringArray("allow-command", []string{"python3 **"}, "allowed commands")
	_ = flagfile.Apply(fs, "agent.yaml", []byte("gpus: 4\n"))
	_ = flagfile.Print(os.Stdout, fs)
	// Output:
	// allow-command: [python3 **]
	// gpus: 4
	// name: gpu-7
}

// changed lists the flags of fs marked as given.
func changed(fs *pflag.FlagSet) []string {
	var out []string
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed {
			out = append(out, f.Name)
		}
	})
	return out
}

// TestDefaultsAreNotGiven: a key at the flag's default does not mark the
// flag as given, so the printed settings, which list every flag, mark as
// given exactly the flags that were.
func TestDefaultsAreNotGiven(t *testing.T) {
	tests := []struct {
		name, data string
		given      []string
	}{
		{"defaults", "id: ''\ninterval: 1m0s\nmax-failures: 5\nfast-gossip: false\ncross-rack-ratio: 2\njoin: []\nallow-command: [python3 **]\n", nil},
		{"an empty list over a default list", "allow-command: []\n", []string{"allow-command"}},
		{"others", "id: s1\ninterval: 1m0s\njoin: [a:1]\n", []string{"id", "join"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs, _ := newFlags()
			if err := flagfile.Apply(fs, "f.yaml", []byte(tt.data)); err != nil {
				t.Fatal(err)
			}
			if got := changed(fs); !slices.Equal(got, tt.given) {
				t.Errorf("given %q, want %q", got, tt.given)
			}
		})
	}
	// Printed and read back, the same flags are given.
	fs, _ := newFlags()
	if err := fs.Parse([]string{"--id", "s1", "--join", "a:1,b:2"}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := flagfile.Print(&out, fs); err != nil {
		t.Fatal(err)
	}
	fs2, _ := newFlags()
	if err := flagfile.Apply(fs2, "printed", out.Bytes()); err != nil {
		t.Fatal(err)
	}
	if got, want := changed(fs2), changed(fs); !slices.Equal(got, want) {
		t.Errorf("read back, the given flags are %q, want %q", got, want)
	}
}
