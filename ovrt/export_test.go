package ovrt

// SetParallelThreshold lets tests force small products onto the pool.
func SetParallelThreshold(m *Model, macs int) { m.parMACs = macs }
