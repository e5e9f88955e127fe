// Package backup keeps a backup of the replicated state on disk (pollux
// operator snapshot save and restore): written whole or not at all,
// readable by its owner only since it holds the tokens' hashes, and
// checked to decode before a cluster is asked to take it.
package backup
