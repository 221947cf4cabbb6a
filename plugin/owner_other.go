//go:build !linux

package plugin

import "strconv"

// ownerName off Linux has no start time to tell a later process with the same pid apart.
func ownerName(pid int) (string, error) { return strconv.Itoa(pid) + "-0", nil }

// ownerAlive off Linux cannot tell a dead owner from a live one: it reports every owner alive,
// so no socket folder is ever swept there.
func ownerAlive(string) bool { return true }
