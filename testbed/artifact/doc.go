// Package artifact is how tests reach the artifacts in ../shared (the
// Pollux and Sia measurements and published figures, never copied into the
// repository). A test that needs one calls Need: without the files it is
// skipped with a message naming them, unless POLLUX_REQUIRE_ARTIFACT=1 (set
// by CI), in which case it fails, so that a CI run without the artifacts
// cannot pass by skipping the tests that guard the published figures.
package artifact
