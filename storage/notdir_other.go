//go:build !unix

package storage

func isNotDir(error) bool { return false }
