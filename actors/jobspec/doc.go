// Package jobspec decodes and validates the job specification a user
// submits (`pollux submit job.yaml`): a name, what to run (a command or a
// built-in emulated application), replica bounds, batch-size limits, a
// checkpoint directory, an optional topology constraint
// (`topology: {required: rack}` or `{preferred: rack}`) and an optional
// GPU type (`gpu_type: a100`).
//
// A spec is outside input: decoding is strict (unknown fields, duplicate
// documents and specs over MaxBytes are rejected) and every validation
// error names the field, the value and why it was refused.
package jobspec
