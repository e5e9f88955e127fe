package node

import (
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
)

// DefaultAllowCommands is what an agent runs without --allow-command:
// the built-in emulated worker (any application) and the documented
// worker client, Debian's python3 running a script of the worker
// library's install directory (docs/worker-library.md).
var DefaultAllowCommands = []string{"emulated:*", "/usr/bin/python3 /opt/pollux/worker/*.py **"}

// ErrPattern is returned by ParseAllowCommands for a pattern that is not
// one.
var ErrPattern = errors.New("node: bad command pattern")

// errDenied marks a run the node's policy forbids.
var errDenied = errors.New("node: not allowed")

// CommandPattern is one entry of an agent's allow-list. "emulated:GLOB"
// allows the emulated applications whose name matches GLOB. Otherwise
// the pattern is a list of words separated by spaces, each a glob
// (path.Match: * and ? never match a '/', so a word cannot reach
// outside the directory it names) matched against the command's argument
// at its position; a last word "**" allows any further arguments, and
// without it the command has exactly as many arguments as the pattern
// has words. The program is matched as the job names it (an absolute
// path is matched as such; a bare name is what the agent's PATH finds).
type CommandPattern struct {
	raw   string
	app   string // the glob of an "emulated:" pattern
	isApp bool
	words []string
	rest  bool // a trailing **
}

func (p CommandPattern) String() string { return p.raw }

// ParseAllowCommands parses an allow-list (nil: DefaultAllowCommands).
func ParseAllowCommands(patterns []string) ([]CommandPattern, error) {
	if patterns == nil {
		patterns = DefaultAllowCommands
	}
	out := make([]CommandPattern, 0, len(patterns))
	for _, raw := range patterns {
		p := CommandPattern{raw: raw}
		if glob, ok := strings.CutPrefix(raw, "emulated:"); ok {
			if _, err := path.Match(glob, ""); err != nil || glob == "" {
				return nil, fmt.Errorf("%w: %q: want emulated:GLOB", ErrPattern, raw)
			}
			p.app, p.isApp = glob, true
			out = append(out, p)
			continue
		}
		p.words = strings.Fields(raw)
		if n := len(p.words); n > 0 && p.words[n-1] == "**" {
			p.words, p.rest = p.words[:n-1], true
		}
		if len(p.words) == 0 {
			return nil, fmt.Errorf("%w: %q names no program", ErrPattern, raw)
		}
		for _, w := range p.words {
			if _, err := path.Match(w, ""); err != nil || w == "**" {
				return nil, fmt.Errorf("%w: %q: word %q is not a glob (** only as the last word)", ErrPattern, raw, w)
			}
		}
		out = append(out, p)
	}
	return out, nil
}

func (p CommandPattern) matches(app string, argv []string) bool {
	if p.isApp {
		ok, _ := path.Match(p.app, app)
		return app != "" && ok
	}
	if app != "" {
		return false
	}
	if len(argv) < len(p.words) || (!p.rest && len(argv) != len(p.words)) {
		return false
	}
	for i, w := range p.words {
		if ok, _ := path.Match(w, argv[i]); !ok {
			return false
		}
	}
	return true
}

// allowed says whether one of patterns allows the emulated application
// app or (app empty) the command argv; the error wraps errDenied.
func allowed(patterns []CommandPattern, app string, argv []string) error {
	for _, p := range patterns {
		if p.matches(app, argv) {
			return nil
		}
	}
	if app != "" {
		return fmt.Errorf("%w: emulated application %q is not in this agent's allow-list (pollux agent --allow-command)", errDenied, app)
	}
	return fmt.Errorf("%w: command %s is not in this agent's allow-list (pollux agent --allow-command)", errDenied, quoteArgv(argv))
}

// quoteArgv shows a command in log lines and acks: quoted words, cut to
// a few hundred bytes.
func quoteArgv(argv []string) string {
	var b strings.Builder
	for i, a := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Quote(a))
		if b.Len() > 300 {
			return b.String()[:300] + "..."
		}
	}
	return b.String()
}
