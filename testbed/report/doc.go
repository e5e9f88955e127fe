// Package report turns simulated runs into what `pollux sim` shows and
// writes: per-run and per-policy summaries (with Pollux's reduction against
// each baseline), a per-job CSV, and PNG plots (JCT CDF per policy; GPUs in
// use and mean batch size over time), the rate sweep's average JCT and
// the scale sweep's policy round times beside Sia's published runtimes.
package report
