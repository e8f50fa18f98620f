// Package testmodel locates the real model files and the oracle reference
// outputs for tests.
//
// The stories15M model lives in the pipeshard home ($PIPESHARD_HOME, by
// default the user's cache directory + "/pipeshard"), under
// models/stories15M, where `pipeshard model pull stories15M` puts it. The
// oracle lives in ../shared/oracle beside the repository (or
// $PIPESHARD_ORACLE).
//
// When the CI environment variable is set, a test whose files are missing
// fails instead of skipping: CI must never pass by running nothing.
package testmodel
