package launch

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ConfigFile is the settings file m runs from with Options.ConfigFiles:
// Dir/<id>.yaml, written from m's command line at each of its starts.
func (c *Cluster) ConfigFile(m *Member) string { return filepath.Join(c.o.Dir, m.ID+".yaml") }

// configArgs writes m's settings (its command line after the command:
// every --name value, --name=value and --name of a boolean flag) to
// ConfigFile(m), readable by its owner only, and returns the command
// line that runs m from the file alone. Call it with m.mu held.
func (c *Cluster) configArgs(m *Member) ([]string, error) {
	if len(m.args) == 0 {
		return nil, fmt.Errorf("%w: %s/%s has no command", ErrCluster, m.Role, m.ID)
	}
	root := &yaml.Node{Kind: yaml.MappingNode}
	values := map[string]*yaml.Node{}
	add := func(name, value string, plain bool) {
		v := values[name]
		if v == nil {
			v = &yaml.Node{Kind: yaml.SequenceNode}
			values[name] = v
			root.Content = append(root.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: name}, v)
		}
		n := &yaml.Node{Kind: yaml.ScalarNode, Value: value, Style: yaml.DoubleQuotedStyle}
		if plain {
			n.Style = 0
		}
		v.Content = append(v.Content, n)
	}
	args := m.args[1:]
	for i := 0; i < len(args); i++ {
		name, ok := strings.CutPrefix(args[i], "--")
		if !ok {
			return nil, fmt.Errorf("%w: %s/%s: argument %q is no flag", ErrCluster, m.Role, m.ID, args[i])
		}
		switch n, v, hasValue := strings.Cut(name, "="); {
		case hasValue:
			add(n, v, false)
		case i+1 < len(args) && !strings.HasPrefix(args[i+1], "--"):
			add(name, args[i+1], false)
			i++
		default:
			add(name, "true", true) // a boolean flag
		}
	}
	// A flag given once is a scalar (a comma list's items are split as
	// on the command line).
	for _, v := range values {
		if len(v.Content) == 1 {
			*v = *v.Content[0]
		}
	}
	data, err := yaml.Marshal(root)
	if err != nil {
		return nil, fmt.Errorf("launch: %s/%s settings: %w", m.Role, m.ID, err)
	}
	file := c.ConfigFile(m)
	if err := os.WriteFile(file, data, 0o600); err != nil {
		return nil, fmt.Errorf("launch: %w", err)
	}
	return []string{m.args[0], "--config", file}, nil
}
