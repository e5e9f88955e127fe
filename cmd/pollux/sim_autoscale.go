package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"pollux/internal/usage"
	"pollux/optimizer"
	"pollux/testbed/simrun"
)

// cloudPolicies are the policies `pollux sim --autoscale` compares, in
// the order it lists them.
var cloudPolicies = []string{"pollux-autoscale", "throughput-autoscale", "fixed"}

// cloudFlags are the flags of `pollux sim --autoscale`.
type cloudFlags struct {
	bootDelay          time.Duration
	nodeCost           float64
	minNodes, maxNodes int
	threshold          float64
	lowUtil, highUtil  float64
	gpuType            string
}

// cloudOnlyFlags may only be given with --autoscale.
var cloudOnlyFlags = []string{"boot-delay", "node-cost", "min-nodes", "max-nodes", "scaling-threshold", "low-util", "high-util", "node-gpu-type"}

// fixedOnlyFlags describe a fixed cluster and are refused with --autoscale.
var fixedOnlyFlags = []struct{ name, why string }{
	{"nodes", "the elastic cluster's size is bounded by --min-nodes and --max-nodes"},
	{"semantics", "an elastic cluster follows the Pollux artifact's testbed, or Sia's simulator with --cluster"},
	{"interference", "interference is not modelled on an elastic cluster"},
	{"racks", "an elastic cluster has one rack"},
	{"oversubscription", "an elastic cluster has one rack"},
	{"node-bandwidth", "an elastic cluster has one rack"},
	{"compare-topology", "an elastic cluster has one rack"},
	{"federation", "federated labs are a separate simulation"},
	{"ground-truth", "Sia's artifact ran no elastic cluster"},
}

// checkCloudFlags refuses flags --autoscale cannot honour, and
// autoscaling flags without it.
func checkCloudFlags(cmd *cobra.Command, autoscale bool) error {
	if !autoscale {
		return refuseFlags(cmd, "sim: --%s needs --autoscale", cloudOnlyFlags...)
	}
	for _, fl := range fixedOnlyFlags {
		if cmd.Flags().Changed(fl.name) {
			return usage.Wrap(fmt.Errorf("sim: --%s cannot be used with --autoscale: %s", fl.name, fl.why))
		}
	}
	return nil
}

// cloudPolicyList expands --policy for --autoscale (all three when the
// flag was not given; on a cluster of several GPU types, all but the
// type-blind throughput-autoscale).
func cloudPolicyList(arg string, given, typed bool) ([]string, error) {
	known := cloudPolicies
	if typed {
		known = slices.DeleteFunc(slices.Clone(cloudPolicies), func(p string) bool { return p == "throughput-autoscale" })
	}
	if !given {
		return known, nil
	}
	var out []string
	for _, name := range strings.Split(arg, ",") {
		name = strings.TrimSpace(name)
		switch {
		case name == "all":
			for _, p := range known {
				if !slices.Contains(out, p) {
					out = append(out, p)
				}
			}
		case typed && name == "throughput-autoscale":
			return nil, fmt.Errorf("sim: --autoscale: throughput-autoscale is blind to GPU types: not with --cluster of several types")
		case slices.Contains(cloudPolicies, name):
			if !slices.Contains(out, name) {
				out = append(out, name)
			}
		default:
			return nil, fmt.Errorf("sim: --autoscale: unknown policy %q (want %s or all)", name, strings.Join(cloudPolicies, ", "))
		}
	}
	return out, nil
}

// cloudPolicy builds one policy of the comparison, adding nodes like
// tmpl; typed: on a cluster of several GPU types (pollux-het, deciding
// the size or not; --p applies to the Pollux search on one type).
func cloudPolicy(name string, f simFlags, workers int, tmpl optimizer.Node, typed bool) (optimizer.Policy, error) {
	as := optimizer.Autoscale{
		Template: tmpl,
		MinNodes: f.cloud.minNodes, MaxNodes: f.cloud.maxNodes,
		LowUtil: f.cloud.lowUtil, HighUtil: f.cloud.highUtil,
	}
	o := optimizer.Options{Workers: workers, ScalingThreshold: f.cloud.threshold}
	base := "pollux"
	if typed {
		base = "pollux-het"
	} else {
		o.PowerMean = &f.p
	}
	switch name {
	case "pollux-autoscale":
		o.Autoscale = &as
	case "throughput-autoscale":
		base, o.Autoscale = name, &as
	}
	return optimizer.Lookup(base, o)
}

// runSimAutoscale is `pollux sim --autoscale`.
func runSimAutoscale(cmd *cobra.Command, f simFlags) error {
	c := f.cloud
	o := simrun.CloudOptions{Workload: f.workload, Traces: f.traces, Cluster: f.cluster, Out: f.out, GPUsPerNode: f.gpusPerNode,
		Parallel: f.parallel, Interval: f.interval, P: f.p, Seed: f.seed, JSON: f.asJSON, BootDelay: c.bootDelay, NodeCost: c.nodeCost,
		MinNodes: c.minNodes, MaxNodes: c.maxNodes, GPUType: c.gpuType, Threshold: c.threshold, LowUtil: c.lowUtil, HighUtil: c.highUtil,
		Policies: func(typed bool) ([]string, error) {
			return cloudPolicyList(f.policy, cmd.Flags().Changed("policy"), typed)
		},
		NewPolicy: func(name string, workers int, tmpl optimizer.Node, typed bool) (optimizer.Policy, error) {
			return cloudPolicy(name, f, workers, tmpl, typed)
		}}
	return simrun.Cloud(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
}
