package alertintake

import (
	"encoding/json"
	"time"
)

// notification is what Grafana's default webhook payload (version "1")
// and Alertmanager's webhook payload (version "4") have in common: a
// notification group and its alerts. Both carry more (group and common
// labels, URLs, Grafana's title, message and values); what spikehunt
// needs is in each alert's labels.
type notification struct {
	Version string          `json:"version"`
	Status  string          `json:"status"`
	Alerts  *[]notifiedItem `json:"alerts"` // a pointer tells a missing list from an empty one
}

type notifiedItem struct {
	Status      string            `json:"status"`
	Labels      map[string]string `json:"labels"`
	StartsAt    time.Time         `json:"startsAt"`
	Fingerprint string            `json:"fingerprint"`
}

// Payload versions this reader knows.
const (
	grafanaPayloadVersion      = "1"
	alertmanagerPayloadVersion = "4"
)

// decodeGrafana decodes the body of a Grafana alerting webhook
// notification (the contact point's default payload; a custom payload
// template is not supported). See decodeNotification.
func decodeGrafana(body []byte, received time.Time) ([]Alert, map[string]int, error) {
	return decodeNotification(SourceGrafana, grafanaPayloadVersion, body, received)
}

// decodeAlertmanager decodes the body of an Alertmanager webhook
// notification. See decodeNotification.
func decodeAlertmanager(body []byte, received time.Time) ([]Alert, map[string]int, error) {
	return decodeNotification(SourceAlertmanager, alertmanagerPayloadVersion, body, received)
}

// decodeNotification returns an Alert per firing alert of a notification,
// in order, and how many alerts yielded none, by reason (resolved,
// no_service, invalid_labels). An error means the body is not a
// notification of this version: the request is malformed (400), and
// nothing of it is used. body is not retained.
func decodeNotification(src Source, version string, body []byte, received time.Time) ([]Alert, map[string]int, error) {
	var n notification
	if err := json.Unmarshal(body, &n); err != nil {
		return nil, nil, refuse(rejectMalformed, "%s notification: %v", src, err)
	}
	if n.Version != version {
		return nil, nil, refuse(rejectMalformed, "%s notification of version %.32q; this operator reads version %s", src, n.Version, version)
	}
	if n.Alerts == nil {
		return nil, nil, refuse(rejectMalformed, "%s notification without an alerts list", src)
	}
	var alerts []Alert
	skipped := map[string]int{}
	for i, item := range *n.Alerts {
		switch item.Status {
		case "firing":
		case "resolved":
			skipped[skipResolved]++
			continue
		default:
			return nil, nil, refuse(rejectMalformed, "%s notification: alert %d has status %.32q, want firing or resolved", src, i, item.Status)
		}
		a, skip := alertFromLabels(src, item.Labels, item.StartsAt, received, item.Fingerprint)
		if skip != "" {
			skipped[skip]++
			continue
		}
		alerts = append(alerts, a)
	}
	return alerts, skipped, nil
}
