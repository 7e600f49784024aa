-- The Capture object a captures row came from, so that the Captures
-- dashboard links a row to the operator's report server
-- (GET /captures/{namespace}/{name}/report, operator/internal/report):
-- a Capture's name is not its capture_id (the arming id, which carries the
-- policy's UID). Rows of captures indexed by no operator (spikehunt demo),
-- or before this column, keep '' and link to no report. Adding columns
-- rewrites no part.
ALTER TABLE {{.Local "captures"}}{{.OnCluster}}
    ADD COLUMN IF NOT EXISTS capture_namespace LowCardinality(String) DEFAULT '' COMMENT 'the Capture object namespace; empty when no operator indexed it',
    ADD COLUMN IF NOT EXISTS capture_name String DEFAULT '' COMMENT 'the Capture object name';

-- On a cluster, the Distributed table over the local ones too.
{{if .Cluster}}ALTER TABLE {{.Name "captures"}}{{.OnCluster}}
    ADD COLUMN IF NOT EXISTS capture_namespace LowCardinality(String) DEFAULT '',
    ADD COLUMN IF NOT EXISTS capture_name String DEFAULT ''{{end}};
