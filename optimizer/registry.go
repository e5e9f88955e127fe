package optimizer

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Options are the settings Lookup builds a policy with. The zero value
// gives every policy its defaults; a setting a policy has no use for is
// ignored.
type Options struct {
	// PowerMean, if not nil, is the fairness exponent p of the Pollux
	// family (pollux, pollux-unaware, pollux-het); nil keeps each one's
	// default (DefaultPowerMean; HetPowerMean for pollux-het).
	PowerMean *float64
	// Workers is how many goroutines Pollux's search uses (pollux,
	// pollux-unaware; 0: its default).
	Workers int
	// MeasuredRestart is Pollux.MeasuredRestart (pollux,
	// pollux-unaware): the running system's servers set it.
	MeasuredRestart bool
	// ProfiledNodes caps Sia's configurations per GPU type (nil: no cap).
	ProfiledNodes map[string]int
	// Autoscale, if not nil, makes pollux and pollux-het decide the
	// cluster size as well (Autoscaled); throughput-autoscale needs it,
	// and the other policies refuse it.
	Autoscale *Autoscale
	// ScalingThreshold is throughput-autoscale's scaling efficiency (0:
	// DefaultScalingThreshold).
	ScalingThreshold float64
}

// registry builds every policy Lookup knows, by name.
var registry = map[string]func(o Options) (Policy, error){
	"pollux": func(o Options) (Policy, error) {
		p := NewPollux()
		o.setPollux(p)
		return o.sized(p)
	},
	"pollux-het": func(o Options) (Policy, error) {
		h := NewHetPollux()
		if o.PowerMean != nil {
			h.PowerMean = *o.PowerMean
		}
		return o.sized(h)
	},
	"pollux-unaware": func(o Options) (Policy, error) {
		p := NewPolluxUnaware()
		o.setPollux(p.Inner)
		return o.fixed(p)
	},
	"sia": func(o Options) (Policy, error) {
		s := NewSia()
		s.ProfiledNodes = o.ProfiledNodes
		return o.fixed(s)
	},
	"tiresias": func(o Options) (Policy, error) { return o.fixed(Tiresias{}) },
	"optimus":  func(o Options) (Policy, error) { return o.fixed(Optimus{}) },
	"throughput-autoscale": func(o Options) (Policy, error) {
		if o.Autoscale == nil {
			return nil, fmt.Errorf("%w: throughput-autoscale decides the cluster size and needs its settings", ErrBadAutoscale)
		}
		if err := o.Autoscale.Validate(); err != nil {
			return nil, err
		}
		t := NewThroughputAutoscale(*o.Autoscale)
		t.Threshold = o.ScalingThreshold
		return t, nil
	},
}

// Lookup builds the policy called name (one of Names) with the options o.
// With o.Autoscale, pollux and pollux-het come wrapped in Autoscaled. An
// unknown name is an error wrapping ErrUnknownPolicy that lists the known
// ones; settings the policy cannot use wrap ErrBadAutoscale.
func Lookup(name string, o Options) (Policy, error) {
	build, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("%w %q: want %s", ErrUnknownPolicy, name, strings.Join(Names(), ", "))
	}
	return build(o)
}

// Names lists the names Lookup knows, sorted.
func Names() []string { return slices.Sorted(maps.Keys(registry)) }

// setPollux applies the options of Pollux's search to p.
func (o Options) setPollux(p *Pollux) {
	if o.PowerMean != nil {
		p.PowerMean = *o.PowerMean
	}
	p.Workers = o.Workers
	p.MeasuredRestart = o.MeasuredRestart
}

// sized is p, deciding the cluster size too when o.Autoscale is set.
func (o Options) sized(p Sizer) (Policy, error) {
	if o.Autoscale == nil {
		return p, nil
	}
	if err := o.Autoscale.Validate(); err != nil {
		return nil, err
	}
	if err := p.checkSizing(o.Autoscale.withDefaults()); err != nil {
		return nil, err
	}
	return NewAutoscaled(p, *o.Autoscale), nil
}

// fixed is p, which decides no cluster size: o.Autoscale is refused.
func (o Options) fixed(p Policy) (Policy, error) {
	if o.Autoscale != nil {
		return nil, fmt.Errorf("%w: %s decides no cluster size (pollux, pollux-het and throughput-autoscale do)", ErrBadAutoscale, p.Name())
	}
	return p, nil
}
