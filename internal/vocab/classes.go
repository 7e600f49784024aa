package vocab

// Pattern classes: how a recurrence spreads over the fleet
// (docs/design.md §5). The detector writes them to patterns.class and the
// alerts; the CLI words sentences for them; CapturePolicies widen on them.
const (
	ClassFleetRecurrent    = "fleet-recurrent"    // many hosts, each at its own moment, every N minutes
	ClassFleetSynchronized = "fleet-synchronized" // many hosts in the same seconds
	ClassIsolatedHost      = "isolated-host"      // one or a few hosts
)

// Classes are every pattern class the detector makes.
var Classes = []string{ClassFleetSynchronized, ClassFleetRecurrent, ClassIsolatedHost}

// KnownClass reports whether c is a class the detector makes.
func KnownClass(c string) bool {
	for _, k := range Classes {
		if k == c {
			return true
		}
	}
	return false
}

// ModifierHWClassSkewed is the pattern modifier for a recurrence that one
// hardware class carries out of proportion to its share of the fleet.
const ModifierHWClassSkewed = "hw-class-skewed"
