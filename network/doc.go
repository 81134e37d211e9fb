// Package network gives pods their own network identity: a network
// namespace pinned under the state root (netns.go), and CNI attachments
// made through libcni from the first configuration in the CNI conf dir
// (cni.go), which is re-read whenever the directory changes so that
// NetworkReady follows it without a restart.
package network
