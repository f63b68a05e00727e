"""Recurring issues: CLEAR-style clustering of critiques into stable, named issues.

Entry points (import from the modules; this package imports nothing so that loading the
config does not pull in scikit-learn):

    tracker.IssueTracker(config, store, clock).run(evaluations, now) -> result.IssuesResult
    tracker.issues_offline(evaluations, config) / files.issues_from_paths(paths, config)
    result.to_json(result)                    the GET /v1/issues object (+ assignments)
    result.top_issue_gauge_samples(result, k, n) Prometheus gauge samples, bounded labels
    runs.page(kept runs, issue_id, at)        a page of an issue's runs (GET /v1/issues/{id}/runs)
    grafana.GrafanaAnnotator(config.grafana)  annotations for new issues and share jumps
"""
