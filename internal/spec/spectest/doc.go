// Package spectest holds statistics for the tests of speculative decoding:
// Pearson's chi-square goodness-of-fit test, with its p-value from the
// regularized incomplete gamma function. Only tests import it.
package spectest
