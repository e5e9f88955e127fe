// Package netns gives each process of a test cluster a network of its
// own, so that the fault-injection harness can partition, degrade and heal
// the network between them.
//
// A Net is a virtual LAN: one network namespace per member (a server or an
// agent, and the workers it starts), each joined by a veth pair to a
// bridge in a namespace of its own, the switch, which the run creates and
// deletes (ip netns, ip link). The harness itself talks to the members
// from the switch namespace (Dial), and is never cut off or slowed down.
//
// Faults are netfilter rules in each member's namespace (iptables), on
// the packets it receives from other members, so that every packet
// between two members meets them exactly once, as on a wire:
//   - Block drops what one member sends to another: Partition(groups) cuts
//     every pair in different groups; any set of pairs gives non-transitive
//     shapes; GroupsBy(label) forms groups from member labels (a rack, a
//     cluster), so that later work partitions whole racks or clusters;
//   - Degrade drops a fraction of the packets (statistic match) and delays
//     the rest (NFQUEUE: the harness holds each packet for the delay before
//     letting it through; the kernel of this project's machines has no
//     sch_netem, so tc netem is not an option);
//   - Heal removes every rule.
//
// It needs root, iproute2 and iptables; Available says what is missing.
// Namespaces are named px<pid>-<n>-<member>: Close deletes a run's, and
// Sweep deletes those left by runs whose process is gone.
package netns
