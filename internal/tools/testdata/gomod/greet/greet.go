// Package greet has a vet finding for run_checks: a self-assignment (vet's "assign" analyzer,
// which go test does not run, so failing_tests reports only calc's failing test).
package greet

// Hello returns a greeting.
func Hello(name string) string {
	name = name
	return "hello " + name
}
