package flagfile

import (
	"fmt"
	"io"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// Print writes the values of every flag of fs (but --config,
// --print-config and --help) as a YAML file that Apply reads back, in
// the flags' order.
func Print(w io.Writer, fs *pflag.FlagSet) error {
	root := &yaml.Node{Kind: yaml.MappingNode}
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name == FlagConfig || f.Name == FlagPrintConfig || f.Name == "help" {
			return
		}
		key := &yaml.Node{Kind: yaml.ScalarNode, Value: f.Name}
		root.Content = append(root.Content, key, valueNode(f))
	})
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return fmt.Errorf("flagfile: %w", err)
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("flagfile: %w", err)
	}
	return nil
}

// valueNode is f's value as YAML: a list for a repeatable flag, else a
// scalar, quoted where a string would read as another type.
func valueNode(f *pflag.Flag) *yaml.Node {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		seq := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		for _, v := range sv.GetSlice() {
			seq.Content = append(seq.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v})
		}
		return seq
	}
	tag := "!!str"
	switch f.Value.Type() {
	case "bool", "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "float32", "float64":
		tag = "" // plain, as the flag prints it
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: f.Value.String()}
}
