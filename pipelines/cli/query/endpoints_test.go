package query

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestTheEndpointClauseNamesTheStalledEndpointsOnlyWhenTheStallsConcentrateOnThem(t *testing.T) {
	for _, tc := range []struct {
		name string
		eps  []PatternEndpoint
		want string
	}{
		{"a dependency of /checkout: the others had requests enough and none slow", []PatternEndpoint{
			{Endpoint: "/checkout", Requests: 15_000, Slow: 5_000}, {Endpoint: "/search", Requests: 10_000},
			{Endpoint: "/feed", Requests: 9_000}, {Endpoint: "/profile", Requests: 9_500, Slow: 1}},
			"; stalls on /checkout only; /search, /feed and /profile unaffected"},
		{"a host-wide stall holds up every endpoint alike", []PatternEndpoint{
			{Endpoint: "/v1/cart", Requests: 40_000, Slow: 9_000}, {Endpoint: "/v1/items", Requests: 35_000, Slow: 7_000},
			{Endpoint: "/v1/orders/save", Requests: 25_000, Slow: 6_000}},
			""},
		{"an endpoint in between: no claim", []PatternEndpoint{
			{Endpoint: "/checkout", Requests: 10_000, Slow: 5_000}, {Endpoint: "/search", Requests: 10_000, Slow: 500},
			{Endpoint: "/feed", Requests: 10_000}},
			""},
		{"an endpoint with too few requests to tell is in neither list", []PatternEndpoint{
			{Endpoint: "/checkout", Requests: 10_000, Slow: 5_000}, {Endpoint: "/search", Requests: 10_000},
			{Endpoint: "/admin", Requests: 12}},
			"; stalls on /checkout only; /search unaffected"},
		{"no requests left (they expire before the detections)", nil, ""},
		{"many unaffected endpoints are counted past four", []PatternEndpoint{
			{Endpoint: "/checkout", Requests: 10_000, Slow: 5_000}, {Endpoint: "/a", Requests: 900}, {Endpoint: "/b", Requests: 800},
			{Endpoint: "/c", Requests: 700}, {Endpoint: "/d", Requests: 600}, {Endpoint: "/e", Requests: 500}, {Endpoint: "/f", Requests: 400}},
			"; stalls on /checkout only; /a, /b, /c, /d and 2 more unaffected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, endpointClause(Pattern{Endpoints: tc.eps})); diff != "" {
				t.Errorf("clause (-want +got):\n%s", diff)
			}
		})
	}
}
