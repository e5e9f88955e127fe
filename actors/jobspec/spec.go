package jobspec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"

	"pollux/optimizer"
	"pollux/optimizer/goodput"
	"pollux/optimizer/topology"
)

// Bounds on what a spec may ask for. Anything beyond them is refused as
// absurd rather than scheduled.
const (
	// MaxBytes is the largest spec accepted, in bytes.
	MaxBytes = 1 << 20
	// MaxReplicas bounds min_replicas and max_replicas.
	MaxReplicas = 1024
	// MaxBatch bounds every batch size.
	MaxBatch = 1 << 24
	// MaxArgs bounds the length of command.
	MaxArgs = 256
	// MaxPath bounds checkpoint_dir.
	MaxPath = 4096
	// DefaultMaxReplicas is max_replicas when the spec leaves it out.
	DefaultMaxReplicas = 64
)

// Spec is one validated job specification.
type Spec struct {
	// Name identifies the job; see CheckName.
	Name string `yaml:"name" json:"name"`
	// Application names a built-in emulated application; Command is a
	// program and its arguments. Exactly one of them is set.
	Application string   `yaml:"application,omitempty" json:"application,omitempty"`
	Command     []string `yaml:"command,omitempty" json:"command,omitempty"`
	// MinReplicas and MaxReplicas bound the job's GPU count when it runs.
	MinReplicas int `yaml:"min_replicas" json:"min_replicas"`
	MaxReplicas int `yaml:"max_replicas" json:"max_replicas"`
	// InitBatch is M0; MaxBatch bounds the total batch M.
	InitBatch int `yaml:"init_batch_size" json:"init_batch_size"`
	MaxBatch  int `yaml:"max_batch_size" json:"max_batch_size"`
	// MinLocalBatch and MaxLocalBatch bound the per-GPU (atomic) batch.
	MinLocalBatch int `yaml:"min_local_batch_size" json:"min_local_batch_size"`
	MaxLocalBatch int `yaml:"max_local_batch_size" json:"max_local_batch_size"`
	// Accumulation allows gradient accumulation.
	Accumulation bool `yaml:"accumulation" json:"accumulation"`
	// CheckpointDir is an absolute directory; empty lets the server
	// choose one.
	CheckpointDir string `yaml:"checkpoint_dir,omitempty" json:"checkpoint_dir,omitempty"`
	// Topology constrains where the replicas run: {required: LEVEL} keeps
	// them all within one domain of the level (the job waits rather than
	// spread), {preferred: LEVEL} within one whenever they fit there.
	// Whether the cluster has the level, and a domain large enough for a
	// required one, is checked at submission.
	Topology optimizer.TopologyConstraint `yaml:"topology,omitempty" json:"topology,omitzero"`
	// GPUType, if set, is the only GPU type the job runs on (a type some
	// agent declares with --gpu-type; checked at submission). Empty: the
	// scheduler picks a type, one at a time.
	GPUType string `yaml:"gpu_type,omitempty" json:"gpu_type,omitempty"`
	// Epochs, if set, is how many epochs the job trains for (0: not
	// declared). The scheduler then reads the epoch the workers report
	// over it as how far the job is through its work, and favours jobs
	// near their end (docs/fidelity.md, "The jobs' own progress"); the
	// workers still decide when the job is done.
	Epochs int `yaml:"epochs,omitempty" json:"epochs,omitempty"`
	// ResumeFrom, if set, names a finished job of the same submitter
	// whose checkpoint directory this job takes over (no live job may
	// hold it); empty: the job checkpoints in ROOT/<its name>.
	ResumeFrom string `yaml:"resume_from,omitempty" json:"resume_from,omitempty"`
}

// FieldError is a refused field: which, its value and why.
type FieldError struct {
	Field  string
	Value  string
	Reason string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("jobspec: %s = %s: %s", e.Field, e.Value, e.Reason)
}

// Unwrap makes every FieldError match ErrInvalid.
func (e *FieldError) Unwrap() error { return ErrInvalid }

func fieldErr(field string, value any, format string, args ...any) error {
	v := fmt.Sprint(value)
	if s, ok := value.(string); ok {
		v = fmt.Sprintf("%q", s)
	}
	if len(v) > 80 {
		v = v[:77] + "..."
	}
	return &FieldError{Field: field, Value: v, Reason: fmt.Sprintf(format, args...)}
}

var (
	nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`)
	appRE  = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)
)

// CheckName reports whether s is a valid job name: 1 to 63 characters of
// lower-case letters, digits, '.', '_' and '-', starting and ending with a
// letter or digit.
func CheckName(s string) error {
	if !nameRE.MatchString(s) {
		return fieldErr("name", s, "want 1-63 characters of [a-z0-9._-], starting and ending with a letter or digit")
	}
	return nil
}

// Decode reads one YAML spec from r, applies defaults and validates it.
func Decode(r io.Reader) (Spec, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxBytes+1))
	if err != nil {
		return Spec{}, fmt.Errorf("jobspec: reading spec: %w", err)
	}
	return Parse(b)
}

// Parse decodes one YAML spec, applies defaults and validates it.
func Parse(b []byte) (Spec, error) {
	if len(b) > MaxBytes {
		return Spec{}, fmt.Errorf("%w: over %d bytes", ErrTooLarge, MaxBytes)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return Spec{}, fmt.Errorf("%w: empty spec", ErrSyntax)
		}
		return Spec{}, fmt.Errorf("%w: %w", ErrSyntax, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return Spec{}, fmt.Errorf("%w: want exactly one YAML document", ErrSyntax)
	}
	s, given, err := fromNode(&doc)
	if err != nil {
		return Spec{}, err
	}
	s.applyDefaults(given)
	if err := s.Validate(); err != nil {
		return Spec{}, err
	}
	return s, nil
}

// fromNode walks the top-level mapping field by field, so that a type
// error names its field.
// It also returns which fields were given.
func fromNode(doc *yaml.Node) (Spec, map[string]bool, error) {
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return Spec{}, nil, fmt.Errorf("%w: want a mapping of fields at the top level", ErrSyntax)
	}
	m := doc.Content[0]
	var s Spec
	fields := map[string]any{
		"name":                 &s.Name,
		"application":          &s.Application,
		"command":              &s.Command,
		"min_replicas":         &s.MinReplicas,
		"max_replicas":         &s.MaxReplicas,
		"init_batch_size":      &s.InitBatch,
		"max_batch_size":       &s.MaxBatch,
		"min_local_batch_size": &s.MinLocalBatch,
		"max_local_batch_size": &s.MaxLocalBatch,
		"accumulation":         &s.Accumulation,
		"checkpoint_dir":       &s.CheckpointDir,
		"topology":             &s.Topology,
		"gpu_type":             &s.GPUType,
		"epochs":               &s.Epochs,
		"resume_from":          &s.ResumeFrom,
	}
	seen := make(map[string]bool, len(fields))
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return Spec{}, nil, fmt.Errorf("%w: line %d: field names must be plain strings", ErrSyntax, k.Line)
		}
		dst, ok := fields[k.Value]
		if !ok {
			return Spec{}, nil, fieldErr(k.Value, v.Value, "unknown field (line %d)", k.Line)
		}
		if seen[k.Value] {
			return Spec{}, nil, fieldErr(k.Value, v.Value, "given twice (line %d)", k.Line)
		}
		seen[k.Value] = true
		if err := checkNoAlias(v); err != nil {
			return Spec{}, nil, fieldErr(k.Value, v.Value, "%v (line %d)", err, v.Line)
		}
		if !tagFits(v, dst) {
			return Spec{}, nil, fieldErr(k.Value, v.Value, "want %s (line %d)", kindOf(dst), v.Line)
		}
		if tc, ok := dst.(*optimizer.TopologyConstraint); ok {
			if err := decodeTopology(v, tc); err != nil {
				return Spec{}, nil, err
			}
			continue
		}
		if err := v.Decode(dst); err != nil {
			return Spec{}, nil, fieldErr(k.Value, v.Value, "want %s (line %d)", kindOf(dst), v.Line)
		}
	}
	return s, seen, nil
}

// decodeTopology reads topology: a mapping of required or preferred to a
// level name, strictly.
func decodeTopology(n *yaml.Node, tc *optimizer.TopologyConstraint) error {
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" {
			return fieldErr("topology", k.Value, "want required: LEVEL or preferred: LEVEL, LEVEL a name such as rack (line %d)", k.Line)
		}
		switch k.Value {
		case "required":
			tc.Required = v.Value
		case "preferred":
			tc.Preferred = v.Value
		default:
			return fieldErr("topology."+k.Value, v.Value, "unknown field: want required or preferred (line %d)", k.Line)
		}
		if seen[k.Value] {
			return fieldErr("topology."+k.Value, v.Value, "given twice (line %d)", k.Line)
		}
		seen[k.Value] = true
	}
	return nil
}

func checkNoAlias(n *yaml.Node) error {
	if n.Kind == yaml.AliasNode {
		return errors.New("aliases are not allowed")
	}
	for _, c := range n.Content {
		if err := checkNoAlias(c); err != nil {
			return err
		}
	}
	return nil
}

// tagFits reports whether node n has the YAML type dst needs. It is
// stricter than the library: 2.5 for an integer is refused, not truncated.
func tagFits(n *yaml.Node, dst any) bool {
	switch dst.(type) {
	case *int:
		return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int"
	case *bool:
		return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!bool"
	case *optimizer.TopologyConstraint:
		return n.Kind == yaml.MappingNode
	case *[]string:
		if n.Kind != yaml.SequenceNode {
			return false
		}
		for _, c := range n.Content {
			if c.Kind != yaml.ScalarNode {
				return false
			}
		}
		return true
	default:
		return n.Kind == yaml.ScalarNode
	}
}

func kindOf(dst any) string {
	switch dst.(type) {
	case *int:
		return "an integer"
	case *bool:
		return "true or false"
	case *[]string:
		return "a list of strings"
	case *optimizer.TopologyConstraint:
		return "a mapping such as {required: rack} or {preferred: rack}"
	default:
		return "a string"
	}
}

// applyDefaults fills the fields that were not given: min_replicas 1,
// max_replicas 64 (at least min_replicas), max_batch_size the initial batch
// (a fixed batch), min_local_batch_size 1, max_local_batch_size the initial
// batch.
func (s *Spec) applyDefaults(given map[string]bool) {
	if !given["min_replicas"] {
		s.MinReplicas = 1
	}
	if !given["max_replicas"] {
		s.MaxReplicas = max(DefaultMaxReplicas, s.MinReplicas)
	}
	if !given["max_batch_size"] {
		s.MaxBatch = s.InitBatch
	}
	if !given["min_local_batch_size"] {
		s.MinLocalBatch = 1
	}
	if !given["max_local_batch_size"] {
		s.MaxLocalBatch = max(s.InitBatch, s.MinLocalBatch)
	}
}

// Validate reports the first refused field of s (defaults already
// applied).
func (s Spec) Validate() error {
	if err := CheckName(s.Name); err != nil {
		return err
	}
	if err := s.validateProgram(); err != nil {
		return err
	}
	ranges := []struct {
		field  string
		v      int
		lo, hi int
		loWhy  string
	}{
		{"min_replicas", s.MinReplicas, 1, MaxReplicas, ""},
		{"max_replicas", s.MaxReplicas, s.MinReplicas, MaxReplicas, "min_replicas"},
		{"init_batch_size", s.InitBatch, 1, MaxBatch, ""},
		{"max_batch_size", s.MaxBatch, s.InitBatch, MaxBatch, "init_batch_size"},
		{"min_local_batch_size", s.MinLocalBatch, 1, MaxBatch, ""},
		{"max_local_batch_size", s.MaxLocalBatch, s.MinLocalBatch, MaxBatch, "min_local_batch_size"},
	}
	for _, r := range ranges {
		if r.v < r.lo || r.v > r.hi {
			why := fmt.Sprintf("want between %d and %d", r.lo, r.hi)
			if r.loWhy != "" && r.v < r.lo {
				why = fmt.Sprintf("must not be below %s (%d)", r.loWhy, r.lo)
			}
			return fieldErr(r.field, r.v, "%s", why)
		}
	}
	if s.MinLocalBatch > s.InitBatch {
		return fieldErr("min_local_batch_size", s.MinLocalBatch, "must not exceed init_batch_size (%d)", s.InitBatch)
	}
	// The job must be able to start on min_replicas GPUs before its
	// first fit, at M = max(M0, min_local*K) split as the scheduler does.
	k := s.MinReplicas
	total := max(s.InitBatch, s.MinLocalBatch*k)
	if total > s.MaxBatch {
		return fieldErr("min_replicas", k, "%d replicas of at least %d samples exceed max_batch_size (%d)", k, s.MinLocalBatch, s.MaxBatch)
	}
	if m, _ := s.Limits().Split(k, float64(total)); m > s.MaxLocalBatch {
		hint := "; set accumulation: true or raise it"
		if s.Accumulation {
			hint = ""
		}
		return fieldErr("max_local_batch_size", s.MaxLocalBatch, "batch %d on %d replica(s) needs %d per GPU%s", total, k, m, hint)
	}
	if err := s.Topology.CheckSyntax(); err != nil {
		return fieldErr("topology", fmt.Sprintf("%+v", s.Topology), "%v", err)
	}
	if s.GPUType != "" {
		if err := topology.CheckName("GPU type", s.GPUType); err != nil {
			return fieldErr("gpu_type", s.GPUType, "%v", err)
		}
	}
	if s.Epochs < 0 || s.Epochs > optimizer.MaxEpochs {
		return fieldErr("epochs", s.Epochs, "want 0 (not declared) to %d", optimizer.MaxEpochs)
	}
	if s.ResumeFrom != "" {
		if !nameRE.MatchString(s.ResumeFrom) {
			return fieldErr("resume_from", s.ResumeFrom, "not a job name (want 1-63 characters of [a-z0-9._-], starting and ending with a letter or digit)")
		}
		if s.ResumeFrom == s.Name {
			return fieldErr("resume_from", s.ResumeFrom, "a job cannot resume from itself")
		}
	}
	if s.CheckpointDir != "" {
		switch {
		case len(s.CheckpointDir) > MaxPath:
			return fieldErr("checkpoint_dir", s.CheckpointDir, "longer than %d bytes", MaxPath)
		case strings.ContainsRune(s.CheckpointDir, 0):
			return fieldErr("checkpoint_dir", s.CheckpointDir, "contains a NUL byte")
		case !filepath.IsAbs(s.CheckpointDir):
			return fieldErr("checkpoint_dir", s.CheckpointDir, "want an absolute path")
		}
	}
	return nil
}

func (s Spec) validateProgram() error {
	switch {
	case s.Application == "" && len(s.Command) == 0:
		return fieldErr("command", "", "set either command or application")
	case s.Application != "" && len(s.Command) > 0:
		return fieldErr("application", s.Application, "set either command or application, not both")
	case s.Application != "":
		if !appRE.MatchString(s.Application) {
			return fieldErr("application", s.Application, "want 1-32 characters of [a-z0-9_-]")
		}
		return nil
	}
	if len(s.Command) > MaxArgs {
		return fieldErr("command", len(s.Command), "more than %d arguments", MaxArgs)
	}
	if s.Command[0] == "" {
		return fieldErr("command", s.Command[0], "the program (first element) is empty")
	}
	for i, a := range s.Command {
		if strings.ContainsRune(a, 0) {
			return fieldErr(fmt.Sprintf("command[%d]", i), a, "contains a NUL byte")
		}
	}
	return nil
}

// Limits are the spec's batch-size limits in the goodput model's terms.
func (s Spec) Limits() goodput.Limits {
	return goodput.Limits{
		InitBatch:    s.InitBatch,
		MaxBatch:     s.MaxBatch,
		MinLocal:     s.MinLocalBatch,
		MaxLocal:     s.MaxLocalBatch,
		Accumulation: s.Accumulation,
	}
}
