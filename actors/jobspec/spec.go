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
	// Replicas, if set, is a user-sized job's fixed replica count: it
	// sets min_replicas and max_replicas, which must then both equal it.
	// Batch, if set (with Replicas), is its fixed total batch: it sets
	// max_batch_size, and min_local_batch_size and max_local_batch_size
	// to Batch / Replicas, without accumulation. The Tiresias policy runs
	// such a job as asked; Pollux keeps it within the same bounds.
	Replicas int `yaml:"replicas,omitempty" json:"replicas,omitempty"`
	Batch    int `yaml:"batch_size,omitempty" json:"batch_size,omitempty"`
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

// AppLimits gives the batch limits of the built-in application app, if
// there is one: a spec naming it takes them for the batch fields it
// leaves out.
type AppLimits func(app string) (goodput.Limits, bool)

// Decode reads one YAML spec from r, applies defaults and validates it.
func Decode(r io.Reader) (Spec, error) { return DecodeWith(r, nil) }

// DecodeWith is Decode with the built-in applications' limits as
// defaults (nil: none).
func DecodeWith(r io.Reader, apps AppLimits) (Spec, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxBytes+1))
	if err != nil {
		return Spec{}, fmt.Errorf("jobspec: reading spec: %w", err)
	}
	return ParseWith(b, apps)
}

// Parse decodes one YAML spec, applies defaults and validates it.
func Parse(b []byte) (Spec, error) { return ParseWith(b, nil) }

// ParseWith is Parse with the built-in applications' limits as defaults
// (nil: none).
func ParseWith(b []byte, apps AppLimits) (Spec, error) {
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
	lines := map[string]int{}
	s, given, errs := fromNode(&doc, lines)
	if given == nil {
		return Spec{}, errors.Join(errs...)
	}
	bad := map[string]bool{} // fields already refused
	for _, err := range errs {
		var fe *FieldError
		if errors.As(err, &fe) {
			bad[fe.Field] = true
		}
	}
	if apps != nil && s.Application != "" {
		if lim, ok := apps(s.Application); ok {
			s.applyApp(lim, given)
		}
	}
	s.applyDefaults(given)
	for _, err := range s.problems() {
		var fe *FieldError
		if errors.As(err, &fe) {
			if bad[fe.Field] {
				continue // refused above already
			}
			if line := lines[fe.Field]; line > 0 {
				fe.Reason = fmt.Sprintf("%s (line %d)", fe.Reason, line)
			}
		}
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return Spec{}, errors.Join(errs...)
	}
	return s, nil
}

// fromNode walks the top-level mapping field by field, so that a type
// error names its field and line. It returns which fields were given,
// recording the line of each in lines, and every error it met.
func fromNode(doc *yaml.Node, lines map[string]int) (Spec, map[string]bool, []error) {
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return Spec{}, nil, []error{fmt.Errorf("%w: want a mapping of fields at the top level", ErrSyntax)}
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
		"replicas":             &s.Replicas,
		"batch_size":           &s.Batch,
		"resume_from":          &s.ResumeFrom,
	}
	seen := make(map[string]bool, len(fields))
	var errs []error
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			errs = append(errs, fmt.Errorf("%w: line %d: field names must be plain strings", ErrSyntax, k.Line))
			continue
		}
		dst, ok := fields[k.Value]
		if !ok {
			errs = append(errs, fieldErr(k.Value, v.Value, "unknown field (line %d)", k.Line))
			continue
		}
		if seen[k.Value] {
			errs = append(errs, fieldErr(k.Value, v.Value, "given twice (line %d)", k.Line))
			continue
		}
		seen[k.Value] = true
		lines[k.Value] = k.Line
		if err := checkNoAlias(v); err != nil {
			errs = append(errs, fieldErr(k.Value, v.Value, "%v (line %d)", err, v.Line))
			continue
		}
		if !tagFits(v, dst) {
			errs = append(errs, fieldErr(k.Value, v.Value, "want %s (line %d)", kindOf(dst), v.Line))
			continue
		}
		if tc, ok := dst.(*optimizer.TopologyConstraint); ok {
			if err := decodeTopology(v, tc); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if err := v.Decode(dst); err != nil {
			errs = append(errs, fieldErr(k.Value, v.Value, "want %s (line %d)", kindOf(dst), v.Line))
		}
	}
	return s, seen, errs
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

// applyApp fills the batch fields that were not given from a built-in
// application's limits, and marks them given.
func (s *Spec) applyApp(lim goodput.Limits, given map[string]bool) {
	for _, f := range []struct {
		field string
		dst   *int
		v     int
	}{
		{"init_batch_size", &s.InitBatch, lim.InitBatch},
		{"max_batch_size", &s.MaxBatch, lim.MaxBatch},
		{"min_local_batch_size", &s.MinLocalBatch, lim.MinLocal},
		{"max_local_batch_size", &s.MaxLocalBatch, lim.MaxLocal},
	} {
		if !given[f.field] && f.v > 0 {
			*f.dst, given[f.field] = f.v, true
		}
	}
	if !given["accumulation"] {
		s.Accumulation, given["accumulation"] = lim.Accumulation, true
	}
}

// applyDefaults fills the fields that were not given: min_replicas 1,
// max_replicas 64 (at least min_replicas), max_batch_size the initial batch
// (a fixed batch), min_local_batch_size 1, max_local_batch_size the initial
// batch; for a user-sized job (replicas, batch_size) the fixed
// configuration instead.
func (s *Spec) applyDefaults(given map[string]bool) {
	if !given["min_replicas"] {
		s.MinReplicas = max(s.Replicas, 1)
	}
	if !given["max_replicas"] {
		s.MaxReplicas = max(DefaultMaxReplicas, s.MinReplicas)
		if s.Replicas > 0 {
			s.MaxReplicas = s.Replicas
		}
	}
	fixed := s.Batch > 0 && s.Replicas > 0
	if !given["max_batch_size"] {
		s.MaxBatch = s.InitBatch
		if fixed {
			s.MaxBatch = s.Batch
		}
	}
	if !given["min_local_batch_size"] {
		s.MinLocalBatch = 1
		if fixed {
			s.MinLocalBatch = s.Batch / s.Replicas
		}
	}
	if !given["max_local_batch_size"] {
		s.MaxLocalBatch = max(s.InitBatch, s.MinLocalBatch)
		if fixed {
			s.MaxLocalBatch = s.Batch / s.Replicas
		}
	}
}

// validateFixed checks a user-sized job's replicas and batch_size against
// the bounds they set.
func (s Spec) validateFixed() error {
	if s.Replicas == 0 && s.Batch == 0 {
		return nil
	}
	switch {
	case s.Replicas < 0 || s.Replicas > MaxReplicas:
		return fieldErr("replicas", s.Replicas, "want 0 (not user-sized) to %d", MaxReplicas)
	case s.Replicas == 0:
		return fieldErr("batch_size", s.Batch, "a fixed batch needs replicas too")
	case s.MinReplicas != s.Replicas || s.MaxReplicas != s.Replicas:
		return fieldErr("replicas", s.Replicas, "min_replicas (%d) and max_replicas (%d) must equal it (leave them out)", s.MinReplicas, s.MaxReplicas)
	case s.Batch == 0:
		return nil
	case s.Batch < s.InitBatch || s.Batch > MaxBatch:
		return fieldErr("batch_size", s.Batch, "want between init_batch_size (%d) and %d", s.InitBatch, MaxBatch)
	case s.Batch%s.Replicas != 0:
		return fieldErr("batch_size", s.Batch, "not a multiple of replicas (%d)", s.Replicas)
	case s.MaxBatch != s.Batch || s.MinLocalBatch != s.Batch/s.Replicas || s.MaxLocalBatch != s.Batch/s.Replicas || s.Accumulation:
		return fieldErr("batch_size", s.Batch, "fixes max_batch_size to it and the local batch sizes to %d, without accumulation (leave them out)", s.Batch/s.Replicas)
	}
	return nil
}

// Validate reports the first refused field of s (defaults already
// applied).
func (s Spec) Validate() error { return errors.Join(s.problems()...) }

// problems are every refused field of s, in the order of Validate's
// checks; those that only make sense once the ranges hold are left out
// while a range does not.
func (s Spec) problems() []error {
	var errs []error
	if err := CheckName(s.Name); err != nil {
		errs = append(errs, err)
	}
	if err := s.validateProgram(); err != nil {
		errs = append(errs, err)
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
	if err := s.validateFixed(); err != nil {
		errs = append(errs, err)
	}
	inRange := true
	for _, r := range ranges {
		if r.v < r.lo || r.v > r.hi {
			why := fmt.Sprintf("want between %d and %d", r.lo, r.hi)
			if r.loWhy != "" && r.v < r.lo {
				why = fmt.Sprintf("must not be below %s (%d)", r.loWhy, r.lo)
			}
			errs, inRange = append(errs, fieldErr(r.field, r.v, "%s", why)), false
		}
	}
	if inRange {
		errs = append(errs, s.fitProblems()...)
	}
	if err := s.Topology.CheckSyntax(); err != nil {
		errs = append(errs, fieldErr("topology", fmt.Sprintf("%+v", s.Topology), "%v", err))
	}
	if s.GPUType != "" {
		if err := topology.CheckName("GPU type", s.GPUType); err != nil {
			errs = append(errs, fieldErr("gpu_type", s.GPUType, "%v", err))
		}
	}
	if s.Epochs < 0 || s.Epochs > optimizer.MaxEpochs {
		errs = append(errs, fieldErr("epochs", s.Epochs, "want 0 (not declared) to %d", optimizer.MaxEpochs))
	}
	if s.ResumeFrom != "" {
		if !nameRE.MatchString(s.ResumeFrom) {
			errs = append(errs, fieldErr("resume_from", s.ResumeFrom, "not a job name (want 1-63 characters of [a-z0-9._-], starting and ending with a letter or digit)"))
		} else if s.ResumeFrom == s.Name {
			errs = append(errs, fieldErr("resume_from", s.ResumeFrom, "a job cannot resume from itself"))
		}
	}
	if s.CheckpointDir != "" {
		switch {
		case len(s.CheckpointDir) > MaxPath:
			errs = append(errs, fieldErr("checkpoint_dir", s.CheckpointDir, "longer than %d bytes", MaxPath))
		case strings.ContainsRune(s.CheckpointDir, 0):
			errs = append(errs, fieldErr("checkpoint_dir", s.CheckpointDir, "contains a NUL byte"))
		case !filepath.IsAbs(s.CheckpointDir):
			errs = append(errs, fieldErr("checkpoint_dir", s.CheckpointDir, "want an absolute path"))
		}
	}
	return errs
}

// fitProblems check that the job can start on min_replicas GPUs before
// its first fit, at M = max(M0, min_local*K) split as the scheduler
// does (the ranges hold).
func (s Spec) fitProblems() []error {
	if s.MinLocalBatch > s.InitBatch && s.Batch == 0 {
		return []error{fieldErr("min_local_batch_size", s.MinLocalBatch, "must not exceed init_batch_size (%d)", s.InitBatch)}
	}
	k := s.MinReplicas
	total := max(s.InitBatch, s.MinLocalBatch*k)
	if total > s.MaxBatch {
		return []error{fieldErr("min_replicas", k, "%d replicas of at least %d samples exceed max_batch_size (%d)", k, s.MinLocalBatch, s.MaxBatch)}
	}
	if m, _ := s.Limits().Split(k, float64(total)); m > s.MaxLocalBatch {
		hint := "; set accumulation: true or raise it"
		if s.Accumulation {
			hint = ""
		}
		return []error{fieldErr("max_local_batch_size", s.MaxLocalBatch, "batch %d on %d replica(s) needs %d per GPU%s", total, k, m, hint)}
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
