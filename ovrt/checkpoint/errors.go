package checkpoint

import "github.com/pipeshard/pipeshard/ovrt"

// sentinel is an error value that also matches, through errors.Is, the
// runtime sentinel its class of failure corresponds to, so callers that
// only know package ovrt's errors (the stage protocol) still classify it.
type sentinel struct {
	msg  string
	ovrt error
}

func (e *sentinel) Error() string { return e.msg }
func (e *sentinel) Unwrap() error { return e.ovrt }

// Sentinel errors. Every error a loader returns wraps one of these (or, for
// I/O failures, the underlying *fs.PathError), names the file, and names
// the tensor, offset or value at fault. Each sentinel also matches the
// ovrt sentinel given in its comment.
var (
	// ErrFormat: the file is not a well-formed checkpoint of its kind
	// (bad header, invalid JSON, inconsistent safetensors metadata).
	// Matches ovrt.ErrBadWeights.
	ErrFormat error = &sentinel{"checkpoint: malformed checkpoint", ovrt.ErrBadWeights}

	// ErrTruncated: the file is shorter than its header says.
	// Matches ovrt.ErrBadWeights.
	ErrTruncated error = &sentinel{"checkpoint: file is truncated", ovrt.ErrBadWeights}

	// ErrTrailingData: the file is longer than its header says.
	// Matches ovrt.ErrBadWeights.
	ErrTrailingData error = &sentinel{"checkpoint: unexpected bytes after the last tensor", ovrt.ErrBadWeights}

	// ErrConfig: the hyperparameters (llama2.c header, config.json) are
	// missing, out of range or inconsistent. Matches ovrt.ErrBadConfig.
	ErrConfig error = &sentinel{"checkpoint: invalid model configuration", ovrt.ErrBadConfig}

	// ErrUnsupported: a well-formed checkpoint of a kind the runtime cannot
	// run (another architecture, RoPE scaling type, tensor dtype, llama2.c
	// export version). Matches ovrt.ErrUnsupported.
	ErrUnsupported error = &sentinel{"checkpoint: unsupported", ovrt.ErrUnsupported}

	// ErrMissingTensor: a tensor the configuration requires is absent.
	// Matches ovrt.ErrBadWeights.
	ErrMissingTensor error = &sentinel{"checkpoint: missing tensor", ovrt.ErrBadWeights}

	// ErrTensorShape: a tensor's shape disagrees with the configuration.
	// Matches ovrt.ErrBadWeights.
	ErrTensorShape error = &sentinel{"checkpoint: tensor shape does not match the configuration", ovrt.ErrBadWeights}

	// ErrLayerRange: the requested layer range is empty or outside the
	// model. Matches ovrt.ErrBadConfig.
	ErrLayerRange error = &sentinel{"checkpoint: invalid layer range", ovrt.ErrBadConfig}
)
