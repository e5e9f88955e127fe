// Package tracefit is `pollux fit`: it fits the seven-parameter
// throughput model (goodput.Fit) to every application of a trace
// directory and reports how well the fit predicts the measured step
// times, in sample and leaving one placement out.
package tracefit
