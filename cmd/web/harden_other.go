//go:build !linux

package main

// dropDumpable does nothing outside Linux (see harden_linux.go).
func dropDumpable() error { return nil }
