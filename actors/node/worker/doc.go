// Package worker carries the PyTorch worker library, pollux_worker, and the
// example training jobs written with it: the worker side of
// docs/worker-protocol.md for real models, as testbed/emulator is for
// emulated ones.
//
// The Python sources live under python/ and are embedded in the binary, so
// that whatever runs real jobs (the tests here, `pollux demo --real`)
// installs exactly the library it was built with into a directory of its
// choice (Install) and runs it with the system interpreter (Python), never
// with whatever other interpreter comes first on the PATH. The library
// needs only the standard library and torch; the examples also use
// scikit-learn's bundled digits. CheckPython says whether the interpreter
// has both, and otherwise names the Debian packages to install.
//
// See docs/worker-library.md for the library itself.
package worker
