// Package flagfile reads a command's flags from a YAML file (pollux
// server --config, pollux agent --config) so that a machine's settings
// live in one file a deployment can keep: each key is a flag's name,
// a flag given on the command line wins over the file, and a bad file is
// refused with the file and line of every mistake. It also prints the
// effective settings in the same form (--print-config).
package flagfile
