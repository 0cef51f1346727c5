// Package calc has one correct function and one bug, for failing_tests.
package calc

// Add returns a + b.
func Add(a, b int) int { return a + b }

// Sub returns a - b, but has a bug.
func Sub(a, b int) int { return a + b }
