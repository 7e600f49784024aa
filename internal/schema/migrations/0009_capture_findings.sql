-- The findings of a capture's analysis on the node (the artifact's
-- explain.json, internal/capture/explain), summarized in the captures row
-- that links it to its spike windows: the slowest explained request's
-- verdict and blocking call chain, the window's hottest CPU and its share
-- of softirq work. Rows written before the analysis existed keep the
-- defaults: no verdict, hottest_cpu -1. Adding columns rewrites no part.
ALTER TABLE {{.Local "captures"}}{{.OnCluster}}
    ADD COLUMN IF NOT EXISTS verdict String DEFAULT '' COMMENT 'the slowest explained request verdict, one line',
    ADD COLUMN IF NOT EXISTS blocking_stack String DEFAULT '' COMMENT 'its longest blocking call chain, innermost first',
    ADD COLUMN IF NOT EXISTS hottest_cpu Int16 DEFAULT -1 COMMENT 'the CPU with the most non-idle samples; -1 none',
    ADD COLUMN IF NOT EXISTS softirq_share Float32 DEFAULT 0 COMMENT 'share of the window samples in softirq work, all CPUs';

-- On a cluster, the Distributed table over the local ones too.
{{if .Cluster}}ALTER TABLE {{.Name "captures"}}{{.OnCluster}}
    ADD COLUMN IF NOT EXISTS verdict String DEFAULT '',
    ADD COLUMN IF NOT EXISTS blocking_stack String DEFAULT '',
    ADD COLUMN IF NOT EXISTS hottest_cpu Int16 DEFAULT -1,
    ADD COLUMN IF NOT EXISTS softirq_share Float32 DEFAULT 0{{end}};
