package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"pollux/actors/server"
)

// Bad autoscaling settings stop a server at start-up (exit 2), naming
// the flag, before it opens anything.
func TestServerAutoscaleBadInput(t *testing.T) {
	dir := t.TempDir()
	base := []string{"server", "--id", "s0", "--data-dir", filepath.Join(dir, "s0"), "--insecure"}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"min above max", []string{"--autoscale", "local", "--min-nodes", "5", "--max-nodes", "4"}, "--min-nodes 5 is above --max-nodes 4"},
		{"negative cost", []string{"--autoscale", "local", "--node-cost", "-1"}, "--node-cost -1"},
		{"NaN cost", []string{"--autoscale", "exec", "--node-cost", "NaN", "--scale-up-command", "a", "--scale-down-command", "b"}, "--node-cost"},
		{"unknown provider", []string{"--autoscale", "cloud"}, `--autoscale "cloud"`},
		{"a setting without autoscaling", []string{"--max-nodes", "8"}, "--max-nodes needs --autoscale"},
		{"exec without commands", []string{"--autoscale", "exec"}, "--scale-up-command"},
		{"local flag with exec", []string{"--autoscale", "exec", "--boot-delay", "1s", "--scale-up-command", "a", "--scale-down-command", "b"}, "--boot-delay is not for --autoscale exec"},
		{"exec flag with local", []string{"--autoscale", "local", "--scale-up-command", "a"}, "--scale-up-command is not for --autoscale local"},
		{"zero template", []string{"--autoscale", "local", "--node-gpus", "0"}, "--node-gpus"},
		{"negative scale-down delay", []string{"--autoscale", "local", "--scale-down-delay", "-1s"}, "--scale-down-delay -1s"},
		{"scale-down delay without autoscaling", []string{"--scale-down-delay", "1m"}, "--scale-down-delay needs --autoscale"},
		{"another policy", []string{"--autoscale", "local", "--policy", "sia"}, "--policy sia"},
		{"negative boot delay", []string{"--autoscale", "local", "--boot-delay", "-1s"}, "--boot-delay"},
		{"bad template GPU type", []string{"--autoscale", "local", "--node-gpu-type", "A100"}, `--node-gpu-type: optimizer: bad topology: GPU type name "A100"`},
		{"template GPU type twice", []string{"--autoscale", "local", "--node-gpu-type", "a100", "--autoscale-agent-arg=--gpu-type=t4"},
			"--autoscale-agent-arg --gpu-type=t4 and --node-gpu-type both give the agents' GPU type"},
		{"template GPU type without autoscaling", []string{"--node-gpu-type", "a100"}, "--node-gpu-type needs --autoscale"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			code, _ := runCapture(t, append(base, tt.args...), &stderr)
			if code != 2 || !strings.Contains(stderr.String(), tt.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, stderr.String(), tt.want)
			}
		})
	}
}

func TestDemoAutoscaleBadInput(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"demo", "--max-nodes", "3"}, "--max-nodes needs --autoscale"},
		{[]string{"demo", "--autoscale", "--agents", "2"}, "--agents cannot be used with --autoscale"},
		{[]string{"demo", "--autoscale", "--real"}, "--real cannot be used with --autoscale"},
		{[]string{"demo", "--autoscale", "--max-nodes", "0"}, "--max-nodes of at least 1"},
		{[]string{"demo", "--autoscale", "--node-cost", "-2"}, "a cost, boot delay and scale-down delay not negative"},
		{[]string{"demo", "--autoscale", "--scale-down-delay", "-1s"}, "a cost, boot delay and scale-down delay not negative"},
		{[]string{"demo", "--scale-down-delay", "1s"}, "--scale-down-delay needs --autoscale"},
	}
	for _, tt := range tests {
		var stderr bytes.Buffer
		code, _ := runCapture(t, tt.args, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tt.args, code, stderr.String(), tt.want)
		}
	}
}

// The template flags reach the server's autoscaling settings:
// --node-gpus and --node-gpu-type make the node template.
func TestServerAutoscaleTemplateFlags(t *testing.T) {
	var o server.Autoscale
	f := pflag.NewFlagSet("server", pflag.ContinueOnError)
	autoscaleFlags(f, &o)
	if err := f.Parse([]string{"--autoscale", "exec", "--scale-up-command", "up", "--scale-down-command", "down",
		"--node-gpus", "8", "--node-gpu-type", "a100", "--max-nodes", "6"}); err != nil {
		t.Fatal(err)
	}
	if err := checkAutoscaleFlags(f, o.Provider); err != nil {
		t.Fatal(err)
	}
	if o.NodeGPUs != 8 || o.NodeGPUType != "a100" || o.MaxNodes != 6 || o.UpCommand != "up" || o.DownCommand != "down" {
		t.Fatalf("settings %+v", o)
	}
}
