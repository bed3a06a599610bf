package verbs

// Probe reports whether this process can use the verbs transport: the
// binary carries it, libibverbs loads, and Select finds a device, port and
// GID (device and gidIndex as for Select). The error says what is missing.
func Probe(device string, gidIndex int) (Choice, error) {
	if err := Load(); err != nil {
		return Choice{}, err
	}
	return Select(device, 1, gidIndex)
}
