package flagfile

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"pollux/internal/usage"
)

// MaxBytes bounds a configuration file.
const MaxBytes = 1 << 20

// Errors of a configuration file.
var (
	ErrNotMapping = errors.New("not a mapping of flag names to values")
	ErrUnknownKey = errors.New("unknown key")
	ErrDuplicate  = errors.New("key given twice")
	ErrBadValue   = errors.New("bad value")
	ErrTooLarge   = fmt.Errorf("file larger than %d bytes", MaxBytes)
)

// Names of the flags that Register adds; they have no key in a file.
const (
	FlagConfig      = "config"
	FlagPrintConfig = "print-config"
)

// Options are the values of --config and --print-config.
type Options struct {
	File  string
	Print bool
}

// Register adds --config and --print-config to fs.
func (o *Options) Register(fs *pflag.FlagSet) {
	fs.StringVar(&o.File, FlagConfig, "", "YAML file of settings: each key a flag's name (data-dir: /var/lib/pollux), "+
		"a list for repeatable flags; flags on the command line win (docs/deploy.md)")
	fs.BoolVar(&o.Print, FlagPrintConfig, false, "print the effective settings (the file, then the flags, over the "+
		"defaults) as YAML and exit")
}

// Load sets the flags of fs that the command line left alone from
// o.File (if any), then, with --print-config, prints the effective
// settings to w and says so (printed: the command should stop). Errors
// are bad input (usage.ErrBadSetting).
func (o *Options) Load(fs *pflag.FlagSet, w io.Writer) (printed bool, err error) {
	if o.File != "" {
		if err := ApplyFile(fs, o.File); err != nil {
			return false, usage.Wrap(err)
		}
	}
	if !o.Print {
		return false, nil
	}
	return true, Print(w, fs)
}

// ApplyFile applies the YAML file at path to fs (see Apply).
func ApplyFile(fs *pflag.FlagSet, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("flagfile: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxBytes+1))
	if err != nil {
		return fmt.Errorf("flagfile: %s: %w", path, err)
	}
	if len(data) > MaxBytes {
		return fmt.Errorf("flagfile: %s: %w", path, ErrTooLarge)
	}
	return Apply(fs, path, data)
}

// Apply sets the flags of fs from data, a YAML mapping of flag names to
// values (a sequence for a repeatable flag), except those already set
// on the command line (whose values in data are still checked). A key
// whose value is the flag's default counts as left out (the flag is not
// marked as given), so that the file Print writes, which lists every
// flag, sets exactly the flags that were given: a command that refuses
// a flag without another, or replaces a built-in default only when the
// flag is given, reads the printed file as it read its own settings.
// Every mistake is reported, each as "flagfile: NAME:LINE: ...". On an
// error no flag is changed.
func Apply(fs *pflag.FlagSet, name string, data []byte) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("flagfile: %s: %w", name, err)
	}
	if len(doc.Content) == 0 || doc.Content[0].Tag == "!!null" {
		return nil // an empty file sets nothing
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("flagfile: %s:%d: %w", name, root.Line, ErrNotMapping)
	}
	var (
		errs  []error
		undo  []func()
		seen  = map[string]int{}
		apply = map[*pflag.Flag]bool{}
	)
	bad := func(n *yaml.Node, format string, args ...any) {
		errs = append(errs, fmt.Errorf("flagfile: %s:%d: "+format, append([]any{name, n.Line}, args...)...))
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], resolve(root.Content[i+1])
		key := k.Value
		f := fs.Lookup(key)
		switch {
		case k.Kind != yaml.ScalarNode:
			bad(k, "%w: a key must be a flag's name", ErrNotMapping)
			continue
		case f == nil || key == FlagConfig || key == FlagPrintConfig || key == "help":
			bad(k, "%w %q%s", ErrUnknownKey, key, suggest(fs, key))
			continue
		case seen[key] != 0:
			bad(k, "%w: %q (first on line %d)", ErrDuplicate, key, seen[key])
			continue
		}
		seen[key] = k.Line
		values, err := valuesOf(f, v)
		if err != nil {
			bad(v, "%s: %w", key, err)
			continue
		}
		restore := snapshot(f)
		if err := set(f, values); err != nil {
			restore()
			bad(v, "%s: %w: %w", key, ErrBadValue, err)
			continue
		}
		if f.Changed {
			restore() // checked; the command line wins
			continue
		}
		undo = append(undo, restore)
		if f.Value.String() != f.DefValue {
			apply[f] = true
		}
	}
	if len(errs) > 0 {
		for _, u := range undo {
			u()
		}
		return errors.Join(errs...)
	}
	for f := range apply {
		f.Changed = true
	}
	return nil
}

// snapshot returns what puts f's value back as it is now.
func snapshot(f *pflag.Flag) func() {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		old := sv.GetSlice()
		return func() { _ = sv.Replace(old) }
	}
	old := f.Value.String()
	return func() { _ = f.Value.Set(old) }
}

// set gives f the values: the list of a repeatable flag, else the one.
func set(f *pflag.Flag, values []string) error {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		return sv.Replace(values)
	}
	return f.Value.Set(values[0])
}

// resolve follows an alias to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// valuesOf are the texts to Set flag f to from node v: one for a
// scalar (or, for a comma-list flag, its comma-separated items), one per
// item of a sequence (repeatable flags only).
func valuesOf(f *pflag.Flag, v *yaml.Node) ([]string, error) {
	_, repeatable := f.Value.(pflag.SliceValue)
	switch {
	case v.Kind == yaml.ScalarNode && v.Tag == "!!null":
		return nil, fmt.Errorf("%w: no value (leave the key out for the default)", ErrBadValue)
	case v.Kind == yaml.ScalarNode && f.Value.Type() == "stringSlice" && v.Value == "":
		return []string{}, nil
	case v.Kind == yaml.ScalarNode && f.Value.Type() == "stringSlice":
		// Comma-separated, as on the command line (--join a:1,b:2).
		items, err := csv.NewReader(strings.NewReader(v.Value)).Read()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadValue, err)
		}
		return items, nil
	case v.Kind == yaml.ScalarNode:
		return []string{v.Value}, nil
	case v.Kind == yaml.SequenceNode && repeatable:
		out := make([]string, 0, len(v.Content))
		for _, item := range v.Content {
			item = resolve(item)
			if item.Kind != yaml.ScalarNode || item.Tag == "!!null" {
				return nil, fmt.Errorf("%w: line %d: a list item must be a single value", ErrBadValue, item.Line)
			}
			out = append(out, item.Value)
		}
		return out, nil
	case v.Kind == yaml.SequenceNode:
		return nil, fmt.Errorf("%w: a list, but the flag takes one value", ErrBadValue)
	}
	return nil, fmt.Errorf("%w: want a value%s", ErrBadValue, map[bool]string{true: " or a list", false: ""}[repeatable])
}

// suggest names the flag closest to an unknown key, if any is close.
func suggest(fs *pflag.FlagSet, key string) string {
	best, dist := "", 3
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name == FlagConfig || f.Name == FlagPrintConfig || f.Name == "help" {
			return
		}
		if d := distance(strings.ToLower(key), f.Name); d < dist && 2*d <= len(key) {
			best, dist = f.Name, d
		}
	})
	if best == "" {
		return " (keys are the command's flag names, without --)"
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// distance is the Levenshtein distance of a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
