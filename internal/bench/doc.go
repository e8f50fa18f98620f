// Package bench measures pipeshard end to end and prints tables: the
// engine (decode and prefill tokens/s, peak memory) and, later, whole
// pipelines.
//
// Every figure is the median of several repetitions taken in one run, so
// ratios between rows are meaningful on a shared, noisy machine. Each
// engine configuration runs in its own child process, so that its peak
// resident memory is its own.
package bench
