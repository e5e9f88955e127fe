package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"

	"pollux/actors/node"
	"pollux/cluster"
	"pollux/internal/cpuset"
	"pollux/internal/member"
	"pollux/internal/usage"
)

// check refuses a bad configuration before anything starts and derives
// the agent's place, GPUs and workers' settings from it.
func (a *agent) check(ctx context.Context) error {
	c := a.cfg
	if c.Name == "" {
		return usage.Errorf("agent: --name is empty")
	}
	if !(c.TimeScale > 0) {
		return usage.Errorf("agent: --time-scale %v, want > 0", c.TimeScale)
	}
	var err error
	if a.meta, err = member.Place(c.Topology, c.Rack, c.GPUType); err != nil {
		return usage.Errorf("agent: %w", err)
	}
	if err := a.checkGPUs(ctx); err != nil {
		return err
	}
	return a.checkWorkers()
}

// checkGPUs sets the agent's GPUs: emulated, CPU slots, or counted.
func (a *agent) checkGPUs(ctx context.Context) error {
	c := a.cfg
	a.gpus = c.GPUs
	if a.gpus < 0 || a.gpus > cluster.MaxGPUs {
		return usage.Errorf("agent: --gpus %d outside [0, %d]", a.gpus, cluster.MaxGPUs)
	}
	switch {
	case c.CPUSlots != 0 && a.gpus != 0:
		return usage.Errorf("agent: --gpus and --cpu-slots exclude each other")
	case c.CPUSlots < 0 || c.CPUSlots > cluster.MaxGPUs:
		return usage.Errorf("agent: --cpu-slots %d outside [1, %d]", c.CPUSlots, cluster.MaxGPUs)
	case c.CPUs != "" && c.CPUSlots == 0:
		return usage.Errorf("agent: --cpus needs --cpu-slots")
	case c.CPUSlots > 0:
		cpus, err := a.cores()
		if err != nil {
			return err
		}
		a.gpus, a.slots = c.CPUSlots, cpuset.Split(cpus, c.CPUSlots)
		if c.CPUSlots > len(cpus) {
			a.log.Warn("agent: more CPU slots than cores: slots share cores", "slots", c.CPUSlots, "cores", len(cpus))
		}
	case a.gpus == 0:
		var err error
		if a.gpus, err = countGPUs(ctx); err != nil {
			return usage.Errorf("agent: %w; pass --gpus N to emulate N GPUs or --cpu-slots N to run on CPUs", err)
		}
	}
	return nil
}

// checkWorkers sets what the agent's workers may run, as whom, with
// which environment, and the program of emulated workers.
func (a *agent) checkWorkers() error {
	c := a.cfg
	a.allow = c.AllowCommands
	if _, err := node.ParseAllowCommands(a.allow); err != nil {
		return usage.Errorf("agent: --allow-command: %w", err)
	}
	var err error
	if a.workerEnv, err = passEnv(c.PassEnv); err != nil {
		return usage.Wrap(err)
	}
	if a.runAs, err = lookupRunAs(c.RunAs); err != nil {
		return usage.Wrap(err)
	}
	if a.uids, err = runAsRange(c.RunAsRange, c.RunAs, os.Geteuid()); err != nil {
		return usage.Wrap(err)
	}
	a.workerExec = c.WorkerExec
	if len(a.workerExec) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("agent: finding own executable: %w", err)
		}
		a.workerExec = []string{exe}
	}
	return nil
}

// cores are the cores the agent's CPU slots split: --cpus, which must
// be within the process's affinity, or the whole affinity.
func (a *agent) cores() ([]int, error) {
	allowed, err := cpuset.Allowed()
	if err != nil {
		return nil, fmt.Errorf("agent: --cpu-slots: %w", err)
	}
	if a.cfg.CPUs == "" {
		return allowed, nil
	}
	cpus, err := cpuset.Parse(a.cfg.CPUs)
	if err == nil {
		err = cpuset.Within(cpus, allowed)
	}
	if err != nil {
		return nil, usage.Errorf("agent: --cpus: %w", err)
	}
	return cpus, nil
}

// countGPUs counts the GPUs nvidia-smi lists.
func countGPUs(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "nvidia-smi", "-L").Output()
	if err != nil {
		return 0, fmt.Errorf("no GPUs detected (nvidia-smi -L: %w)", err)
	}
	n := 0
	for _, line := range bytes.Split(out, []byte("\n")) {
		if bytes.HasPrefix(bytes.TrimSpace(line), []byte("GPU ")) {
			n++
		}
	}
	if n == 0 {
		return 0, errors.New("no GPUs detected (nvidia-smi lists none)")
	}
	return n, nil
}
