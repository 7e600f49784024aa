package testenv

import "time"

// RecentDay is the start (00:00 UTC) of the day before the test binary
// started. Test data that goes into the store is dated from it: a fixed
// date ages past the tables' TTLs and the ingest's accepted window, and a
// date of "now" can cross midnight while a test runs. Data built on
// RecentDay is at most two days old whenever the suite runs, which every
// TTL and window of the default schema keeps.
//
// It is computed once per test binary, so every test of a package sees the
// same day.
func RecentDay() time.Time { return recentDay }

var recentDay = time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -1)
