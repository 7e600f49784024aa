// Package policy holds the operator's decisions as pure functions
// (docs/design.md §7): which nodes get bait, which more an alert arms, and what
// the budgets let through. The CapturePolicy and Capture controllers and
// `spikehunt demo` call the same functions. Nothing here talks to
// Kubernetes, does I/O or reads a clock: the time is an input, and the
// types are plain structs that the controller maps to and from the CRDs.
//
//   - Sample: the epoch's bait.
//   - Widen: the extra nodes a matching alert arms.
//   - Admit: the budget gate over proposed armings.
//   - ArmingName: the deterministic Capture name of an arming.
//   - Decide: all of it for one policy: sample, expire what left the
//     sample, widen on alerts, admit; the controller applies the result.
//
// # Sampling
//
// The epoch is floor(now / RotationPeriod). The target k (Count, or Percent
// of the nodes rounded up) is split among the hardware classes in
// proportion to class size by largest remainder, with at least one node
// per class: every class gets bait, and when every class's proportional
// share k·n/N is at least 1, each class is within ±1 of it. (A class whose
// share is below 1 still gets 1, which the larger classes pay for. With
// fewer bait than classes, k classes get one each, taking turns across
// epochs.)
//
// Within a class of n nodes with a bait per epoch, the nodes are a deck
// shuffled by a hash of (policy, node, cycle), where a cycle is the
// ceil(n/a) epochs it takes to deal the whole deck, and epoch e deals the
// (e mod ceil(n/a))-th hand of a cards. So within a cycle consecutive
// samples are disjoint and every node gets bait once (the last hand wraps
// around to the first cards), and each new cycle deals a fresh pseudo-random
// order. Compared with drawing each epoch independently, which leaves
// (1 − f)^(1/f) ≈ 35% of the fleet unbaited after 1/f epochs at fraction f,
// a whole cycle baits every node, and any 1/f consecutive epochs reach ≥ 75%
// of it in expectation (the tail of one cycle and the head of the next).
// The hash is FNV-1a 64 with a final mixer; the same inputs give the same
// sample on any machine and in any process.
//
// # Alerts
//
// A matching alert arms Trigger.ExtraNodes nodes over its life, and at
// least one in each hardware class it names hosts of. The hosts it names
// come first, dealt round-robin over their classes; the rest come from the
// affected classes' decks. Bait is a guess and an alert is evidence: when
// the fleet's concurrency budget refuses an alert's armings, Decide
// expires as many of the policy's unfired bait as it refused (from the
// class holding the most bait, armed longest first, never on a host the
// alert names), and the next decision, once they are done, admits the
// alert's armings.
// Without that, bait that never fires (on hosts the pattern spares) holds
// the budget for its whole epoch while the alert waits out its time in the
// controller's inbox. `make bench-capture-strategy` measures what this
// buys (docs/benchmarks.md, "Capture strategy, measured").
//
// # Budgets
//
// Budgets are fleet-wide: Admit counts the active armings of every policy,
// one arming per node at a time and a cooldown between starts on a node,
// and the armings of one pattern key started within the last hour. Every
// refusal carries a RefusalReason. A zero budget is no limit.
//
// # Hazards for the caller
//
//   - The budgets hold only if decisions are serialized across policies:
//     two policies deciding at once against the same State each admit up
//     to the budget. Run the deciding controller with one worker, or hold
//     one lock around fetch → Decide → apply.
//   - State must include the armings the previous decisions created. A
//     controller-runtime cache may not show a Capture created a moment ago:
//     read Captures with an uncached client, or add the armings the
//     controller created and the cache has not shown yet.
//   - Apply Decision.Expire before Decision.Create. Expired armings still
//     count in the decision that expires them.
//   - Capture names come from ArmingName, so creating one that exists
//     (AlreadyExists) means an earlier attempt got through: not an error.
package policy
