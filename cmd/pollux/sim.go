package main

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"pollux/optimizer"
	"pollux/testbed/fabric"
	"pollux/testbed/sim"
	"pollux/testbed/simrun"
)

func init() { subcommands = append(subcommands, newSimCmd) }

// simPolicyOrder is the order runs and tables list policies in.
var simPolicyOrder = []string{"pollux", "pollux-unaware", "sia", "pollux-het", "tiresias", "optimus"}

// simAll is what --policy all runs: on one untyped GPU type the Pollux
// artifact's comparison, on typed clusters Sia's.
func simAll(types int, typed bool) []string {
	switch {
	case types > 1:
		return []string{"pollux-unaware", "sia", "pollux-het"}
	case typed:
		return []string{"pollux", "sia", "pollux-het"}
	}
	return []string{"pollux", "tiresias", "optimus"}
}

// simFlags are the flags of `pollux sim`.
type simFlags struct {
	workload, traces, policy, out string
	groundTruth                   string
	cluster, semantics            string
	federation                    string
	nodes, gpusPerNode, parallel  int
	interval                      time.Duration
	interference, p               float64
	seed                          uint64
	asJSON, pSet                  bool
	racks                         int
	oversubscription, bandwidth   float64
	compareTopology               bool
	// autoscale runs the elastic-cluster comparison (sim_autoscale.go).
	autoscale bool
	cloud     cloudFlags
}

func newSimCmd() *cobra.Command {
	var f simFlags
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Replay workloads on a simulated cluster under Pollux, Sia, Tiresias or Optimus",
		Long:  longHelp("sim", false, "workloads", fmt.Sprint(simrun.GeneratedWorkloads)),
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runSim(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.workload, "workload", "", "workload CSV file, a directory of them, or a directory of such directories (a sweep) (default: generated)")
	fl.StringVar(&f.traces, "traces", "", "trace directory in the artifact layout (default: built-in profiles)")
	fl.StringVar(&f.policy, "policy", "pollux", "comma-separated policies ("+strings.Join(simPolicyOrder, ", ")+") or all")
	fl.IntVar(&f.nodes, "nodes", 16, "nodes in the cluster (one untyped GPU type; see --cluster)")
	fl.IntVar(&f.gpusPerNode, "gpus-per-node", 4, "GPUs per node (one untyped GPU type; see --cluster)")
	fl.StringVar(&f.cluster, "cluster", "", "GPU types and nodes: a preset (hetero, homogeneous), TYPE:NODES[xGPUS],... or a CSV file")
	fl.StringVar(&f.semantics, "semantics", "auto", "testbed semantics: pollux (the Pollux artifact), sia (Sia's simulator), or auto (sia with --cluster)")
	fl.DurationVar(&f.interval, "interval", 60*time.Second, "scheduling interval (whole seconds)")
	fl.Float64Var(&f.interference, "interference", 0, "slowdown of a distributed job sharing a node with another, in [0, 1]")
	fl.Float64Var(&f.p, "p", -1, "Pollux fairness exponent of the power mean (1 utilitarian, more negative fairer)")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the policies and of generated workloads")
	fl.IntVar(&f.parallel, "parallel", runtime.NumCPU(), "runs to simulate at once")
	fl.StringVar(&f.out, "out", "", "directory for summary.json, jobs.csv and PNG plots")
	fl.StringVar(&f.groundTruth, "ground-truth", "", "Sia artifact's runs (testbed/sim/testdata/sia-artifact/ground-truth.json) drawn beside a sweep's plot (with --out)")
	fl.BoolVar(&f.asJSON, "json", false, "print exactly one JSON object on stdout")
	fl.IntVar(&f.racks, "racks", 1, "racks the nodes are spread over, consecutive nodes in each")
	fl.Float64Var(&f.oversubscription, "oversubscription", 2, "with --racks: how many times less a rack's uplink carries than its nodes' links (>= 1)")
	fl.Float64Var(&f.bandwidth, "node-bandwidth", fabric.DefaultNodeBandwidth*8/1e9, "with --racks: every node's link in Gbit/s")
	fl.BoolVar(&f.compareTopology, "compare-topology", false, "run the policy aware of the racks and blind to them, and compare (needs --racks of at least 2 and one policy)")
	fl.StringVar(&f.federation, "federation", "", "simulate federated labs described by a JSON file, or "+simrun.Example+" for the built-in one, isolated, merged and federated (see docs/federation.md)")
	dc := sim.DefaultCloud()
	fl.BoolVar(&f.autoscale, "autoscale", false, "elastic cluster: compare pollux-autoscale, throughput-autoscale and a fixed cluster of --max-nodes on cost and JCT (default workload: the paper's cloud scenario, one ImageNet job)")
	fl.DurationVar(&f.cloud.bootDelay, "boot-delay", time.Duration(dc.BootDelay)*time.Second, "with --autoscale: time from asking for a node to its joining")
	fl.Float64Var(&f.cloud.nodeCost, "node-cost", dc.NodeCost, "with --autoscale: price of one node-hour")
	fl.IntVar(&f.cloud.minNodes, "min-nodes", dc.MinNodes, "with --autoscale: fewest nodes (the cluster starts with max(min-nodes, 1))")
	fl.IntVar(&f.cloud.maxNodes, "max-nodes", dc.MaxNodes, "with --autoscale: most nodes (and the fixed cluster's size)")
	fl.Float64Var(&f.cloud.threshold, "scaling-threshold", optimizer.DefaultScalingThreshold, "with --autoscale: throughput-autoscale adds a node while it adds at least this fraction of linear throughput")
	fl.Float64Var(&f.cloud.lowUtil, "low-util", optimizer.DefaultLowUtil, "with --autoscale: pollux-autoscale keeps the size while utility is at least this")
	fl.Float64Var(&f.cloud.highUtil, "high-util", optimizer.DefaultHighUtil, "with --autoscale: ... and at most this")
	fl.StringVar(&f.cloud.gpuType, "node-gpu-type", "", "with --autoscale --cluster: GPU type of the nodes the cluster adds and releases "+
		"(one of --cluster's, whose GPUs per node it takes; the other types' nodes are fixed; default: the cluster's only type)")
	return cmd
}

// runSim is `pollux sim`: on a fixed cluster, or with --autoscale or
// --federation.
func runSim(cmd *cobra.Command, f simFlags) error {
	f.pSet = cmd.Flags().Changed("p")
	if err := checkCloudFlags(cmd, f.autoscale); err != nil {
		return err
	}
	switch {
	case f.autoscale:
		return runSimAutoscale(cmd, f)
	case f.federation != "":
		return runSimFederation(cmd, f)
	}
	o := simrun.Options{Workload: f.workload, Traces: f.traces, Cluster: f.cluster, Semantics: f.semantics, Nodes: f.nodes,
		GPUsPerNode: f.gpusPerNode, Interval: f.interval, Interference: f.interference, P: f.p, Seed: f.seed, Parallel: f.parallel,
		Out: f.out, GroundTruth: f.groundTruth, JSON: f.asJSON, Racks: f.racks, Oversubscription: f.oversubscription, NodeBandwidth: f.bandwidth,
		CompareTopology: f.compareTopology, PolicyOptions: simPolicyOptions(f),
		Policies: func(types int, typed bool) ([]string, error) { return simPolicyList(f.policy, types, typed) }}
	return simrun.Run(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
}

// simFederationFlags are the sim flags that do not apply with
// --federation (the file describes the clusters and their policies).
var simFederationFlags = []string{"cluster", "nodes", "gpus-per-node", "policy", "semantics", "interval", "interference", "out", "ground-truth"}

// runSimFederation is `pollux sim --federation FILE`.
func runSimFederation(cmd *cobra.Command, f simFlags) error {
	if err := refuseFlags(cmd, "sim: --%s does not apply with --federation (the federation file describes every lab's cluster and policy)",
		simFederationFlags...); err != nil {
		return err
	}
	o := simrun.FederationOptions{File: f.federation, Workload: f.workload, Traces: f.traces, Parallel: f.parallel, Seed: f.seed, JSON: f.asJSON,
		PolicyOptions: simPolicyOptions(f)}
	return simrun.Federation(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
}

// simPolicyList expands --policy: comma-separated names of the registry
// (optimizer.Names) or all, on a cluster of types GPU types (typed:
// named by --cluster).
func simPolicyList(arg string, types int, typed bool) ([]string, error) {
	var out []string
	for _, name := range strings.Split(arg, ",") {
		name = strings.TrimSpace(name)
		if name == "all" {
			for _, p := range simAll(types, typed) {
				if !slices.Contains(out, p) {
					out = append(out, p)
				}
			}
			continue
		}
		pol, err := optimizer.Lookup(name, optimizer.Options{})
		switch {
		case errors.Is(err, optimizer.ErrBadAutoscale):
			return nil, fmt.Errorf("sim: policy %s decides the cluster size: run it with --autoscale", name)
		case err != nil:
			return nil, fmt.Errorf("sim: %w, or all", err)
		}
		if _, aware := pol.(optimizer.TypeAware); types > 1 && !aware {
			return nil, fmt.Errorf("sim: policy %s cannot tell GPU types apart and the cluster has %d; use pollux-unaware (Pollux with Sia's heuristic for mixed types) or sia", name, types)
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out, nil
}

// simPolicyOptions are the registry options of --p: the exponent of the
// Pollux family when it was given (pollux-het has its own default).
func simPolicyOptions(f simFlags) optimizer.Options {
	var o optimizer.Options
	if f.pSet {
		o.PowerMean = &f.p
	}
	return o
}
