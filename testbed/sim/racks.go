package sim

import (
	"fmt"

	"pollux/optimizer/goodput"
	"pollux/testbed/fabric"
)

// links is the network across racks of a run of several racks: what a
// placement across racks pays on top of the traces (package fabric),
// which neither the policy nor the jobs are told.
type links struct {
	net *fabric.Fabric
	// bytes is every application's gradient size.
	bytes map[string]float64
	flows []fabric.Flow
	on    []*job
}

// newLinks builds the network of cfg over the racks of rackOf (nil for
// one rack) for the applications of jobs.
func newLinks(cfg Config, rackOf []int, jobs []*job) (*links, error) {
	if cfg.Racks <= 1 {
		return nil, nil
	}
	sizes := make([]int, cfg.Racks)
	for _, r := range rackOf {
		sizes[r]++
	}
	net, err := fabric.New(fabric.Config{NodeBandwidth: cfg.NodeBandwidth, Oversubscription: max(cfg.Oversubscription, 1)}, sizes)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	l := &links{net: net, bytes: map[string]float64{}}
	for _, j := range jobs {
		app := j.spec.App
		if _, ok := l.bytes[app]; ok {
			continue
		}
		b, ok := cfg.GradientBytes[app]
		if !ok {
			b, ok = fabric.GradientBytes(app)
		}
		if !ok || !(b > 0) {
			return nil, fmt.Errorf("%w: application %q has no gradient size for the network across racks (Config.GradientBytes)", ErrBadConfig, app)
		}
		l.bytes[app] = b
	}
	return l, nil
}

// share sets every job's time added per synchronised step by the network
// across racks for the moment: the jobs training across racks (not
// restarting) share the uplinks they cross.
func (l *links) share(jobs []*job, rackOf []int) error {
	l.flows, l.on = l.flows[:0], l.on[:0]
	for _, j := range jobs {
		if j.done || !j.running() || j.restartLeft > 0 || j.racks < 2 {
			j.setCrossExtra(0)
			continue
		}
		fl := fabric.Flow{}
		for _, nc := range j.alloc {
			fl[rackOf[nc.Node]]++
		}
		l.flows = append(l.flows, fl)
		l.on = append(l.on, j)
	}
	if len(l.flows) == 0 {
		return nil
	}
	rates, err := l.net.Rates(l.flows)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	for i, j := range l.on {
		j.setCrossExtra(l.net.Extra(l.flows[i], l.bytes[j.spec.App], rates[i]))
	}
	return nil
}

// advanceLinked is advance on a cluster of several racks: the interval is
// cut where a job's restart ends (it then starts to use the uplinks), and
// the uplinks are shared anew for every piece.
func (s *state) advanceLinked(slow map[int]bool) error {
	done := 0.0
	for done < s.cfg.Interval {
		piece := s.cfg.Interval - done
		for _, j := range s.jobs {
			if !j.done && j.running() && j.restartLeft > 0 && j.restartLeft < piece {
				piece = j.restartLeft
			}
		}
		if err := s.links.share(s.jobs, s.rackOf); err != nil {
			return err
		}
		for _, j := range s.jobs {
			if j.crossExtra > 0 {
				j.trueCross += piece * j.crossExtra / goodput.RackShare(j.racks)
				j.trueCrossTime += piece
			}
			j.advance(s.now+done, piece, s.interference(slow, j))
		}
		done += piece
	}
	return nil
}
