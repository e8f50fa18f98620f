// Package kernels is a placeholder; see the full manual below.
package kernels

//go:generate go run ./internal/asmgen -dir .
